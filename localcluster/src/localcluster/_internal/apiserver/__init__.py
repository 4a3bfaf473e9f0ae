"""The API server's HTTP face: a request's path to resource and verb (targets), authentication and
authorization, the verbs on stored objects (api), list and watch, request bodies (JSON, YAML, protobuf),
discovery and OpenAPI stubs, Table output, the subresources (log, binding, eviction, token, reviews, and the
connect ones: exec, attach, port-forward), and injected faults."""

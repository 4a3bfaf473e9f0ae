"""A cluster put together and run: `ClusterSpec` (nodes, runtime, rules, images), `LocalCluster` (the store,
API server, controllers and runtime started together, on a private loop or the caller's), `TestCluster`
(what a test holds: clients, kubectl, faults), `serve` (`python -m localcluster serve`), the background
daemon and the `localcluster up|status|down` CLI."""

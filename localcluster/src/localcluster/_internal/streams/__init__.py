"""The streaming protocols of `kubectl exec`, `attach`, `cp` and `port-forward`: the remote-command and
port-forward channel framing, switching a request to WebSocket or raw SPDY/3.1, SPDY frames and connections,
and one exec/attach session or port-forward relay between a client and a runtime."""

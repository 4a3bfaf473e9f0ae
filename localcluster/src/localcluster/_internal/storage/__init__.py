"""Where objects live: the store (what etcd plus the watch cache are to a real API server: resourceVersions,
watches, bounded history) and the registry of the resources the server serves."""

"""regroup's I/O shell: gRPC service, Postgres store, timers and runtime."""

"""The Python client for regroup (the member side of the protocol)."""

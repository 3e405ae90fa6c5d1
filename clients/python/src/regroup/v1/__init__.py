"""Generated protobuf and gRPC stubs for regroup.v1 (made by `make proto`; do not edit)."""

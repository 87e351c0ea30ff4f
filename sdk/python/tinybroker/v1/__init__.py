"""Generated from proto/tinybroker/v1/broker.proto by `make generate`: the messages (protoc) and the service stub (grpc_tools)."""

"""Synthetic captures for tests and benchmarks: protobuf encoder, HLO text, scenarios with injected answers."""

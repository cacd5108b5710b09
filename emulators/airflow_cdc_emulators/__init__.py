"""Local servers speaking the real Google gRPC APIs, for tests, the demo and laptops."""

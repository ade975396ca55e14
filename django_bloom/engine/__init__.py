"""The Bloom filter engine: hashing, layouts, the key format, storage, the wire protocol.

Nothing in here imports the public API, the features or Django models; see
docs/architecture.md for the layers.
"""

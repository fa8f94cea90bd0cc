"""High-level ops, as mixins of GraphTensor, built only from primitives."""

"""JAX backends."""

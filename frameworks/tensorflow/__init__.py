"""TensorFlow backends."""

"""PaddlePaddle backends."""

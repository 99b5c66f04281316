"""One subpackage per framework; each is imported only inside worker processes."""

"""PyTorch backends: single device, nn.DataParallel, DistributedDataParallel."""

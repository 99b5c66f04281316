"""The contract every framework and strategy computes identically, as data and numpy: model
specifications, canonical initial weights, datasets, the order and sharding of batches, the
optimizer rules and schedule, and tasks (what is learnt: the input, the loss, the evaluation,
the throughput unit). It imports only parbench.base; frameworks/ builds everything from it."""

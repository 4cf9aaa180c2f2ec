"""AntDT for PyTorch: DDP training over AntDT's dynamic data sharding.

- :class:`Session` runs one rank's training loop: data from the sharding
  service, commits after the step that trained on them, loss weighting for
  uneven local batches, the Controller's batch directives, step reports to the
  node agent, and a process group that forms again after a rank restarts.
- :class:`ShardedDataset` (an ``IterableDataset``) and :class:`StepCommits`
  are the data half on its own, for a loop of your own.
- :class:`ElasticGroup` is the re-formable process group on its own.
- :mod:`antdt.torch.checkpoint` saves and restores a model with the step whose
  records are committed.
"""

from antdt.torch.data import WAIT, ClientSpec, Record, ShardedDataset, StepCommits
from antdt.torch.group import ElasticGroup, GroupError
from antdt.torch.journal import Journal
from antdt.torch.session import Session, Step, Summary

__all__ = [
    "ClientSpec",
    "ElasticGroup",
    "GroupError",
    "Journal",
    "Record",
    "Session",
    "ShardedDataset",
    "Step",
    "StepCommits",
    "Summary",
    "WAIT",
]

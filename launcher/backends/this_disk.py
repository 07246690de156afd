"""Run outputs read from this machine's disk, for the backends whose lead writes where the launcher reads (local
tasks; Slurm nodes on a shared filesystem)."""

from __future__ import annotations

from cluster.config import ClusterConfig
from launcher import run_outputs
from launcher.backends.base import RunOutputs


class ThisDiskOutputs:
    """Mixed into a Backend before it: the lead's outputs are on this machine's disk."""

    config: ClusterConfig

    def run_outputs(self) -> RunOutputs:
        """The lead's summary and best record, read from this machine's disk."""
        return run_outputs.read(self.config)

    def fetch_tensorboard(self, local_dir: str) -> str:
        """The lead's TensorBoard events, where they are on this machine's disk (nothing to copy)."""
        return str(run_outputs.files(self.config).tensorboard)

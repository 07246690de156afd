"""The strategy table: one frozen description per strategy, read by validation, task specs, launcher and trainer."""

from __future__ import annotations

import dataclasses
import enum


class StrategyName(str, enum.Enum):
    """The values `training.strategy` accepts."""

    PARAMETER_SERVER = "parameter_server"
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"
    MIRRORED = "mirrored"
    ONE_DEVICE = "one_device"


class GpuSharing(enum.Enum):
    """How a host's listed GPUs are given to its tasks."""

    ONE_PER_WORKER = "one GPU per worker, in order; a spare one to the evaluator"
    SPLIT_BETWEEN_WORKERS = "the host's GPUs split evenly between its workers"
    ALL_TO_CHIEF = "every GPU of its host to the chief"
    FIRST_TO_CHIEF = "the first GPU of its host to the chief"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Strategy:
    """What a strategy runs: which jobs cluster.json needs, which are started (in order), which train, which serve."""

    name: StrategyName
    required_jobs: tuple[str, ...]
    launched_jobs: tuple[str, ...]  # start order; the evaluator, when listed, comes last
    trainer_job: str  # runs coordinator.train and exits when training is done; its task 0 leads
    server_jobs: tuple[str, ...]  # run roles.server until stopped
    cluster_jobs: tuple[str, ...]  # the jobs in a trainer's TF_CONFIG; () for a single process without one
    gpus: GpuSharing
    tf_strategy: str  # the tf.distribute class it builds
    restarts_as_group: bool  # collectives cannot lose a member: one trainer's death restarts them all

    @property
    def lead_job(self) -> str:
        return self.trainer_job


STRATEGIES = {strategy.name: strategy for strategy in (
    Strategy(name=StrategyName.PARAMETER_SERVER, required_jobs=("chief", "worker", "ps"),
             launched_jobs=("ps", "worker", "chief", "evaluator"), trainer_job="chief", server_jobs=("ps", "worker"),
             cluster_jobs=("chief", "worker", "ps"), gpus=GpuSharing.ONE_PER_WORKER,
             tf_strategy="ParameterServerStrategy", restarts_as_group=False),
    Strategy(name=StrategyName.MULTI_WORKER_MIRRORED, required_jobs=("worker",),
             launched_jobs=("worker", "evaluator"), trainer_job="worker", server_jobs=(), cluster_jobs=("worker",),
             gpus=GpuSharing.SPLIT_BETWEEN_WORKERS, tf_strategy="MultiWorkerMirroredStrategy",
             restarts_as_group=True),
    Strategy(name=StrategyName.MIRRORED, required_jobs=("chief",), launched_jobs=("chief", "evaluator"),
             trainer_job="chief", server_jobs=(), cluster_jobs=(), gpus=GpuSharing.ALL_TO_CHIEF,
             tf_strategy="MirroredStrategy", restarts_as_group=False),
    Strategy(name=StrategyName.ONE_DEVICE, required_jobs=("chief",), launched_jobs=("chief", "evaluator"),
             trainer_job="chief", server_jobs=(), cluster_jobs=(), gpus=GpuSharing.FIRST_TO_CHIEF,
             tf_strategy="OneDeviceStrategy", restarts_as_group=False),
)}
STRATEGY_NAMES = tuple(name.value for name in StrategyName)


def strategy_named(name: str) -> Strategy:
    """The table's entry for a validated `training.strategy` value."""
    return STRATEGIES[StrategyName(name)]

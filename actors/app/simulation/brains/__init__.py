"""Brains: what drives each agent's steps (``[simulation.brain]``).

:func:`brain_factory` picks the configured kind: ``scripted`` (built in, seeded,
offline), ``llm`` (a chat model behind any OpenAI-compatible endpoint, or a
recording of one) or ``python`` (the user's ``module:callable``).
:func:`check_brain` refuses a bad brain spec before a run starts, and
:func:`open_recording` opens the recording a run writes or replays.
"""

from __future__ import annotations

from pathlib import Path

from actormem.actors.app.simulation.brains.protocol import (
    AgentInfo,
    Brain,
    BrainError,
    BrainFactory,
    Crowd,
    Others,
    Turn,
)
from actormem.actors.app.simulation.brains.python import brain_failed, python_brain
from actormem.actors.app.simulation.brains.recording import (
    Recorder,
    Replayer,
    check_record_dir,
)
from actormem.actors.app.simulation.brains.scripted import ScriptedBrain
from actormem.actors.app.simulation.scenario import Talk
from actormem.actors.config import AppConfig, BrainConfig
from actormem.runtime.errors import ConfigError

__all__ = (
    "AgentInfo",
    "Brain",
    "BrainError",
    "BrainFactory",
    "Crowd",
    "Others",
    "ScriptedBrain",
    "Turn",
    "brain_factory",
    "brain_failed",
    "check_brain",
    "open_recording",
)


def brain_factory(config: AppConfig, talk: Talk | None = None) -> BrainFactory:
    """The factory of the brain ``config.simulation.brain`` names (``talk``: what the
    scripted brain talks about, the scenario's; the town's by default).

    Raises:
        BrainError: the spec is incomplete (llm without base URL or model, python
            without a callable) or the user's callable cannot be loaded or has the
            wrong shape.
    """
    brain = config.simulation.brain
    if brain.kind == "python":
        if not brain.callable:
            raise BrainError('brain kind "python" needs callable = "module:callable"')
        return python_brain(brain.callable)
    if brain.kind == "llm":
        needed = ("base_url", "model") if not brain.replay else ()
        missing = [k for k in needed if not getattr(brain, k)]
        if missing:
            flags = " and ".join(f"--{k.replace('_', '-')}" for k in missing)
            raise BrainError(
                f'brain kind "llm" needs {" and ".join(missing)} in [simulation.brain] (or {flags})'
            )
        from actormem.actors.app.simulation.brains.llm import LLMBrain

        return lambda agent: LLMBrain(agent, brain)
    simulation = config.simulation
    return lambda agent: ScriptedBrain(agent, simulation, talk)


def check_brain(config: AppConfig) -> None:
    """Refuse a bad brain spec before the run starts (see :func:`brain_factory`).

    Raises:
        BrainError: naming what is wrong.
        ConfigError: the ``record`` directory cannot take a recording, or the
            ``replay`` one holds none (or one of another model).
    """
    brain_factory(config)
    brain = config.simulation.brain
    if brain.record:
        _check_record(brain)
    if brain.replay:
        _replayer(brain)


def open_recording(brain: BrainConfig, version: str) -> tuple[Recorder | None, Replayer | None]:
    """The recording a run with this brain config writes (``record``), or answers
    its model requests from (``replay``); None for neither.

    Raises:
        ConfigError: see :func:`check_brain`.
    """
    if brain.record:
        _check_record(brain)
        return Recorder(Path(brain.record), brain.model, version), None
    if brain.replay:
        return None, _replayer(brain)
    return None, None


def _check_record(brain: BrainConfig) -> None:
    if not (brain.base_url and brain.model):
        raise ConfigError(
            "--record records a model's answers: it needs base_url and model (--base-url, --model)"
        )
    check_record_dir(Path(brain.record))


def _replayer(brain: BrainConfig) -> Replayer:
    replayer = Replayer(Path(brain.replay))
    if brain.model and brain.model != replayer.model:
        raise ConfigError(
            f"--replay {brain.replay}: it was recorded with the model {replayer.model!r}, "
            f"not {brain.model!r} (leave the model out to take the recording's)"
        )
    return replayer

"""Brains: what drives each agent's steps (``[simulation.brain]``).

:func:`brain_factory` picks the configured kind: ``scripted`` (built in, seeded,
offline), ``llm`` (a chat model behind any OpenAI-compatible endpoint) or
``python`` (the user's ``module:callable``). :func:`check_brain` refuses a bad
brain spec before a run starts.
"""

from __future__ import annotations

from actormem.actors.app.simulation.brains.protocol import (
    AgentInfo,
    Brain,
    BrainError,
    BrainFactory,
    Crowd,
    Turn,
)
from actormem.actors.app.simulation.brains.python import python_brain
from actormem.actors.app.simulation.brains.scripted import ScriptedBrain
from actormem.actors.app.simulation.scenario import Talk
from actormem.actors.config import AppConfig

__all__ = (
    "AgentInfo",
    "Brain",
    "BrainError",
    "BrainFactory",
    "Crowd",
    "ScriptedBrain",
    "Turn",
    "brain_factory",
    "check_brain",
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
        missing = [k for k in ("base_url", "model") if not getattr(brain, k)]
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
    """
    brain_factory(config)

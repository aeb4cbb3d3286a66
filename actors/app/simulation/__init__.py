"""The multi-agent simulation behind ``actormem simulate``: a scenario's agents (the
town by default), each driven by a brain (scripted, an LLM, or the user's own),
talking through their memories; and its report.
"""

from __future__ import annotations

from actormem.actors.app.simulation.brains import (
    AgentInfo,
    Brain,
    BrainError,
    BrainFactory,
    Turn,
    brain_factory,
    check_brain,
)
from actormem.actors.app.simulation.brains.llm_client import LLMUsage
from actormem.actors.app.simulation.goals import GoalScore
from actormem.actors.app.simulation.report import (
    AgentReport,
    SimulationReport,
    known_share,
    report_dict,
)
from actormem.actors.app.simulation.run import DRAIN_S, PARTIAL_REPORT_S, run_simulation
from actormem.actors.app.simulation.scenario import Scenario, load_scenario, town_scenario
from actormem.actors.app.simulation.town import PlantedFact, agent_names, plant_facts

__all__ = (
    "DRAIN_S",
    "PARTIAL_REPORT_S",
    "AgentInfo",
    "AgentReport",
    "Brain",
    "BrainError",
    "BrainFactory",
    "GoalScore",
    "LLMUsage",
    "PlantedFact",
    "Scenario",
    "SimulationReport",
    "Turn",
    "agent_names",
    "brain_factory",
    "check_brain",
    "known_share",
    "load_scenario",
    "plant_facts",
    "report_dict",
    "run_simulation",
    "town_scenario",
)

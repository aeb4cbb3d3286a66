"""Adapters that plug agent memory into the frameworks and protocols people already
run; each lives in its own module behind its own optional extra, imported only
when used (``import actormem`` never needs them).

- :mod:`actormem.actors.integrations.mcp`: a Model Context Protocol server of the
  memory tools (extra ``mcp``; ``actormem mcp CONFIG``).
- :mod:`actormem.actors.integrations.langgraph`: a LangGraph store over agents'
  keyed long-term entries, and a graph's message history in an agent's memory
  (extra ``langgraph``).
- :mod:`actormem.actors.integrations.agent_framework`: Microsoft Agent
  Framework's history and context providers on an agent's memory (extra
  ``agent-framework``).
- :mod:`actormem.actors.integrations.agentscope`: an AgentScope middleware that
  keeps an agent's conversation in its memory (extra ``agentscope``).
- :mod:`actormem.actors.integrations.memory_tools`: the memory tools themselves
  (names, input schemas, and their calls on a memory handle), for any
  tool-calling protocol.
"""

__all__ = ()

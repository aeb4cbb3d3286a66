"""The application: wiring (MemoryRuntime), the command line, and the simulation."""

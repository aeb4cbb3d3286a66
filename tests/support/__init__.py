"""Test helpers shared by several test packages (loopback servers)."""

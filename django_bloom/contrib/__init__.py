"""Integrations with other tools (each needs its optional extra)."""

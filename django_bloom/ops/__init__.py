"""Running filters: stats and health, validator counters, verify/repair, formatting for
the admin and the command."""

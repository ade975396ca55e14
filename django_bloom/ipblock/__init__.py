"""The IP blocklist feature: address parsing, the netset parser (pure), the service, the
middleware, its admin."""

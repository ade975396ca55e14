def point(value):
    """Encoder used in tests: (x, y) tuples become 'x,y'."""
    if isinstance(value, tuple):
        return f"{value[0]},{value[1]}"
    return value

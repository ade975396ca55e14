"""The layout registry: a filter row's ``layout`` value -> its layout class.

Like ``PASSWORD_HASHERS``' ``identify_hasher``: the row stores a name, the
registry gives the class. A new layout is a new ``Layout`` subclass passed to
``register_layout`` (see docs/architecture.md); nothing else in the engine
changes.
"""

from __future__ import annotations

from django_bloom.engine.kinds.base import Layout, Measure
from django_bloom.engine.kinds.blocked import OneWordLayout
from django_bloom.engine.kinds.counting.layout import CountingLayout
from django_bloom.engine.kinds.native.layout import NativeLayout
from django_bloom.engine.kinds.rotating.layout import RotatingLayout
from django_bloom.engine.kinds.scalable.layout import ScalableLayout
from django_bloom.engine.kinds.sharded import ShardedLayout
from django_bloom.engine.kinds.standard import StandardLayout
from django_bloom.engine.segment import Segment

_registry: dict[str, type[Layout]] = {}


def register_layout(cls: type[Layout]) -> type[Layout]:
    """Make ``cls`` the layout of rows whose ``layout`` is ``cls.layout_name``."""
    if not cls.layout_name:
        raise ValueError(f"{cls.__name__} has no layout_name")
    _registry[cls.layout_name] = cls
    return cls


def unregister_layout(name: str) -> None:
    _registry.pop(name, None)


def layout_names() -> list[str]:
    return list(_registry)


def layouts_with(capability: type) -> list[str]:
    """Names of the registered kinds that have ``capability`` (engine/kinds/capabilities.py)."""
    return [name for name, cls in _registry.items() if issubclass(cls, capability)]


def layout_choices() -> list[tuple[str, str]]:
    """(name, "name: description") of every registered kind: the admin's and ``bloom
    create``'s choices."""
    return [
        (name, f"{name}: {cls.description}" if cls.description else name)
        for name, cls in _registry.items()
    ]


def layout_class(name: str) -> type[Layout]:
    """The class a row's ``layout`` value names; ValueError for an unknown one."""
    try:
        return _registry[name]
    except KeyError:
        raise ValueError(f"unknown layout {name!r}; choose from {', '.join(_registry)}") from None


register_layout(StandardLayout)
register_layout(OneWordLayout)
register_layout(CountingLayout)
register_layout(RotatingLayout)
register_layout(ScalableLayout)
register_layout(ShardedLayout)
register_layout(NativeLayout)

__all__ = [
    "CountingLayout",
    "Layout",
    "Measure",
    "OneWordLayout",
    "RotatingLayout",
    "ScalableLayout",
    "Segment",
    "ShardedLayout",
    "StandardLayout",
    "layout_choices",
    "layout_class",
    "layout_names",
    "layouts_with",
    "register_layout",
    "unregister_layout",
]

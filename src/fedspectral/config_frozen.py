"""The frozen objects of a validated config (:class:`fedspectral.config.ValidConfig`):
every assignment refused, naming the field; a copy is the object itself; called (as
:func:`dataclasses.replace` and :func:`dataclasses.asdict` do), a frozen class builds its
editable original.  :func:`frozen_value` freezes a config, :func:`thawed` thaws one."""

from __future__ import annotations

import copy
import dataclasses
import typing
from typing import Any

__all__ = ["Frozen", "frozen_class", "frozen_value", "register", "revive", "thawed"]


def _refuse(where: str) -> dataclasses.FrozenInstanceError:
    return dataclasses.FrozenInstanceError(
        f"cannot change {where}: a validated config is frozen (build a changed copy, "
        f"dataclasses.replace or fedspectral.config.thaw, and validate that)"
    )


def revive(cls: type, state: dict[str, Any]) -> Any:
    """A frozen config object of ``cls`` holding ``state`` (unpickling; no check)."""
    obj: Any = object.__new__(cls)
    obj.__dict__.update(state)
    return obj


class Frozen:
    """What the frozen config objects share: every assignment is refused, naming the
    field; a copy is the object itself (nothing can change it); called (as
    :func:`dataclasses.replace` does), the class builds the editable original."""

    _where: typing.ClassVar[str] = ""
    _editable: typing.ClassVar[type]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._editable(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise _refuse(f"{self._where}.{name}" if self._where else name)

    def __delattr__(self, name: str) -> None:
        raise _refuse(f"{self._where}.{name}" if self._where else name)

    def __eq__(self, other: object) -> bool:  # equal to its editable twin
        if isinstance(other, self._editable):
            return dataclasses.asdict(typing.cast(Any, self)) == dataclasses.asdict(
                typing.cast(Any, other)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # holds mappings: unhashable like them

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    def __reduce__(self) -> Any:  # by the editable class: a fresh process makes the frozen one
        return (_revive_frozen, (self._editable, self._where, dict(self.__dict__)))


#: the frozen class of each config dataclass: its ``Valid<name>`` made on first use, or the
#: one registered (:class:`fedspectral.config.ValidConfig`)
_FROZEN: dict[type, type] = {}


def frozen_class(cls: type, where: str = "") -> type:
    """The frozen subclass of the config dataclass ``cls`` (fields named
    ``<where>.<field>``): the one registered (:func:`register`), else ``Valid<cls>``."""
    if cls not in _FROZEN:
        doc = f"A frozen ``{where}`` section of a validated config."
        attrs = {"_where": where, "_editable": cls, "__module__": __name__, "__doc__": doc}
        _FROZEN[cls] = type(f"Valid{cls.__name__}", (Frozen, cls), attrs)
    return _FROZEN[cls]


def register(cls: type, frozen: type[Frozen]) -> None:
    """``frozen`` (a :class:`Frozen` subclass of ``cls``) is the frozen class of ``cls``."""
    frozen._editable = cls
    _FROZEN[cls] = frozen


def _revive_frozen(cls: type, where: str, state: dict[str, Any]) -> Any:
    """A frozen object of the config dataclass ``cls`` again (unpickling; no check)."""
    return revive(frozen_class(cls, where), state)


class _FrozenDict(dict[str, Any]):
    """A read-only mapping of a validated config (``method.params``, ``model.kwargs``): a
    ``dict`` to every reader; ``type(d)(...)`` (as :func:`dataclasses.asdict` copies it)
    and ``d.copy()`` give plain dicts."""

    __slots__ = ("_where",)
    _where: str

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return dict(*args, **kwargs)

    def _refused(self, *args: Any, **kwargs: Any) -> Any:
        raise _refuse(self._where)

    def _refused_key(self, key: Any, *args: Any) -> Any:
        raise _refuse(f"{self._where}.{key}")

    __setitem__ = __delitem__ = pop = setdefault = _refused_key
    __ior__ = clear = popitem = update = _refused

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    def __reduce__(self) -> Any:
        return (frozen_value, (dict(self), self._where))


class _FrozenList(list[Any]):
    """A read-only list of a validated config (a ``list`` to every reader)."""

    __slots__ = ("_where",)
    _where: str

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return list(*args, **kwargs)

    def _refused(self, *args: Any, **kwargs: Any) -> Any:
        raise _refuse(self._where)

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refused
    append = extend = insert = pop = remove = clear = sort = reverse = _refused

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    def __reduce__(self) -> Any:
        return (frozen_value, (list(self), self._where))


def frozen_value(value: Any, where: str = "") -> Any:
    """``value`` frozen: a config dataclass (:func:`frozen_class`), mapping or list, and
    what they hold; anything else (a number, a string, ``None``) as it is (a copy)."""
    if isinstance(value, Frozen):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        state = {
            f.name: frozen_value(getattr(value, f.name), f"{where}.{f.name}" if where else f.name)
            for f in dataclasses.fields(value)
        }
        return revive(frozen_class(type(value), where), state)
    if isinstance(value, dict):
        d = dict.__new__(_FrozenDict)
        dict.update(d, {k: frozen_value(v, f"{where}.{k}") for k, v in value.items()})
        object.__setattr__(d, "_where", where)
        return d
    if isinstance(value, list):
        lst = list.__new__(_FrozenList)
        list.extend(lst, [frozen_value(v, f"{where}[{i}]") for i, v in enumerate(value)])
        object.__setattr__(lst, "_where", where)
        return lst
    return copy.deepcopy(value)


def thawed(value: Any) -> Any:
    """An editable deep copy of ``value`` (frozen or not): plain dataclasses, dicts, lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = getattr(type(value), "_editable", type(value))
        return cls(**{f.name: thawed(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thawed(v) for v in value]
    return copy.deepcopy(value)

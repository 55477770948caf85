"""The error every bad input becomes, and the small checks that raise it with the accepted form in the message."""

from __future__ import annotations

from pipeline import exits


class ConfigError(ValueError):
    """A bad input: `field`, then what is wrong and what is accepted. The command ends with `exit_code`."""

    exit_code = exits.BAD_INPUT

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class StoreUnavailable(ConfigError):
    """A place the command writes to that fails for a reason of the machine, not of the input (its disk is full):
    found before anything runs, it ends the command like a store failing at run time, with exit code 1."""

    exit_code = exits.FAILED


def spelled(value: object) -> str:
    """A value as the command line spelled it: YAML's true, false and null where Hydra parsed them (a text field holds
    a parsed bool as 'True' or 'False')."""
    if isinstance(value, bool) or value in ("True", "False"):
        return str(value).lower()
    return "null" if value is None else str(value)


def choice(field: str, value: object, accepted: tuple[str, ...]) -> None:
    if value not in accepted:
        raise ConfigError(field, f"got '{spelled(value)}'; accepted: {', '.join(accepted)}")


def fewer_than_batch(field: str, where: str, count: int, effective: int, unit: str) -> ConfigError:
    """Data of fewer records than one effective batch (every step would train short): `where` names the data as the
    message shows it, `unit` what of `effective` records is accepted (a file, a dataset)."""
    return ConfigError(
        field,
        f"{where} has {count} record{'s' if count != 1 else ''}, fewer than batch.effective {effective}; accepted: "
        f"{unit} of {effective} records or more, or a smaller batch.effective",
    )


def at_least(field: str, value: float | int | None, low: float, what: str = "a whole number") -> None:
    if value is None or value < low:
        raise ConfigError(field, f"got {value}; accepted: {what} >= {low:g}")


def in_range(field: str, value: float, low: float, high: float) -> None:
    if not (low <= value < high):
        raise ConfigError(field, f"got {value}; accepted: a number in [{low:g}, {high:g})")


def at_most(field: str, value: int, high: int, what: str = "a whole number") -> None:
    if value > high:
        raise ConfigError(field, f"got {value}; accepted: {what} up to {high:,}")

"""Opening a study: the name a command's config gives it, its binding to that config, its sampler, its storage, the
space it searches, and its MLflow parent run, gathered in one `StudyContext` that every part of the study shares.

A study answers for one config identity (the model, data, knobs and cap; the split is searched): the same command
opens the same study by the same derived name and resumes it. The identity is stored on the study, so a name given
with `optimize.study_name` that belongs to another config's study is refused before anything is written
(`check_binding`), rather than mixing two configs' trials into one answer.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from functools import cached_property

import optuna
import sqlalchemy
from omegaconf import DictConfig, OmegaConf

from pipeline import knobs as speed_knobs
from pipeline.config.errors import ConfigError
from pipeline.config.identity import digest, identity_tree
from pipeline.config.knobs import setting_of
from pipeline.knobs import Slack
from pipeline.measure.flops import Shape
from pipeline.records import GIB
from pipeline.search._calibration import ATTR as CALIBRATION
from pipeline.search._calibration import Calibration, knobs_of
from pipeline.search._formula import Knobs
from pipeline.search._left_out import candidates
from pipeline.search._longest import RunBatches
from pipeline.search._predictor import Predictor
from pipeline.search._sampler import make_sampler
from pipeline.search._space import Candidate, LeftOut, knob_space
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker, flatten, store_lock
from pipeline.tracking.uris import absolute_uri, not_made

OBJECTIVE = "step s"
IDENTITY = "identity"  # the study's user attribute: the config identity it answers for (`bound_identity`)
SEARCH_SETTINGS = ("trials", "sampler", "seed", "storage", "study_name")  # shape how, not what, is answered
# how long the confirmation round may go on, not what it pairs: left out of what a named study is bound to
ROUND_BUDGET = ("confirm_share", "confirm_budget_s", "confirm_floor_s", "confirm_rounds")


def study_name(cfg: DictConfig, cap_bytes: int, leave_out: tuple[str, ...] = ()) -> str:
    """Same command, same name: the config's identity and the search settings that shape the answer (trials,
    sampler, seed and storage do not), less `leave_out`."""
    search = OmegaConf.to_container(cfg.optimize, resolve=True)
    for key in (*SEARCH_SETTINGS, *leave_out):
        search.pop(key, None)
    tree = {**identity_tree(cfg), "optimize": search}
    tree["batch"].pop("split", None)  # always searched
    return f"{cfg.model.name}-e{cfg.batch.effective}-cap{cap_bytes / GIB:g}GiB-{digest(tree, 8)}"


def _existing_rdb(uri: str) -> optuna.storages.RDBStorage | None:
    """The storage at `uri` opened to read, or None where no command has finished creating it (no sqlite file, or
    tables not yet stamped with their schema version): nothing is written. Opening a storage stamps an unstamped one
    even with `skip_table_creation` (Optuna's version manager), so a reader that got between a command's tables and
    its stamp wrote the stamp too, and the command's own failed (`UNIQUE constraint failed: alembic_version`). A
    stamp, once there, stays: seen stamped, the open below writes nothing."""
    if not_made(uri):
        return None
    if not _stamped(uri):
        return None
    return optuna.storages.RDBStorage(uri, skip_compatibility_check=True, skip_table_creation=True)


def _stamped(uri: str) -> bool:
    """Whether the database at `uri` holds Optuna's schema stamp (its `alembic_version` row), read without writing."""
    engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as connection:
            if not sqlalchemy.inspect(connection).has_table("alembic_version"):
                return False
            return connection.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).first() is not None
    finally:
        engine.dispose()


def bound_identity(cfg: DictConfig, cap_bytes: int) -> str:
    """What a named study is bound to: its config and search, whatever budget its confirmation round is given (a
    round stopped short is run again by the same command with more rounds or a larger share)."""
    return study_name(cfg, cap_bytes, ROUND_BUDGET)


def check_binding(cfg: DictConfig, cap_bytes: int) -> None:
    """A study named by `optimize.study_name` that exists must be this config's: another config's study is refused
    (its trials would be read as this config's, and its answer overwritten). Checked up front, before anything runs;
    `open_study` checks again where it binds, for a study another command created since."""
    name = cfg.optimize.study_name
    if name is None:
        return
    storage = _existing_rdb(str(cfg.optimize.storage))
    if storage is None:
        return
    try:
        stored = storage.get_study_user_attrs(storage.get_study_id_from_name(name)).get(IDENTITY)
    except KeyError:
        return  # no such study yet
    finally:
        storage.remove_session()
        storage.engine.dispose()
    _check_bound(cfg, cap_bytes, name, stored)


def _check_bound(cfg: DictConfig, cap_bytes: int, name: str, stored: str | None) -> None:
    """Refuse a study bound to `stored` when this config's identity is another."""
    mine = bound_identity(cfg, cap_bytes)
    if stored is not None and stored not in (mine, study_name(cfg, cap_bytes)):  # the second: a study stored so before
        raise ConfigError(
            "optimize.study_name",
            f"'{name}' is the study of another config ({stored}; this command's is {mine}); accepted: a name no "
            "study has yet, the command that started that study, or null (named after the config)",
        )


def open_study(cfg: DictConfig, name: str, storage: str, cap_bytes: int) -> optuna.Study:
    """Create the study bound to this config's identity, or load it to resume, under the store's lock: of two
    commands that give one name to two configs at once, the second to get there finds the first's study and is
    refused (ConfigError) having written nothing to it. The study carries its metric's name and its identity."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the study's own lines say what it opened
    with store_lock(storage):
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            sampler=make_sampler(cfg.optimize.sampler, cfg.optimize.seed, cfg.optimize.tie_tolerance),
            direction="minimize",
            load_if_exists=True,
        )
        _check_bound(cfg, cap_bytes, name, study.user_attrs.get(IDENTITY))
        if study.metric_names is None:
            with warnings.catch_warnings():  # "experimental" since Optuna 3.2, and what the dashboard reads
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names([OBJECTIVE])
        if IDENTITY not in study.user_attrs:
            study.set_user_attr(IDENTITY, bound_identity(cfg, cap_bytes))
    return study


@dataclass
class StudyContext:
    """What every part of one study shares: its config and cap, its space and candidates, its stores, and what the
    calibration found (`placement_dtype`, `device`), with the memory predictor fitted to it."""

    cfg: DictConfig
    command: list[str]  # the study's overrides but the searched keys: the start of every reproduce line
    cap: int
    name: str
    space: dict[str, list]
    valid: list[Candidate]
    left_out: list[LeftOut]  # values of the space that cannot run on this setting, with the reason
    study: optuna.Study
    storage: str
    tracker: Tracker
    predictor: Predictor
    parent: str = ""  # the MLflow parent run, once opened
    placement_dtype: str | None = None
    device: str | None = None
    extra: dict[str, Candidate] = field(default_factory=dict)  # configs measured beside the space (its baseline)
    batches: RunBatches | None = None  # the run the answer must fit, and each config's longest micro-batch of it
    _knobs: dict[tuple[str, str | None], Knobs] = field(default_factory=dict, repr=False)  # `knobs`, once a config

    @classmethod
    def open(cls, cfg: DictConfig, command: list[str], cap: int) -> StudyContext:
        space = knob_space(cfg)
        valid, left_out = candidates(cfg)
        searched = set(space)
        kept = [o for o in command if o.partition("=")[0].lstrip("+~") not in searched]
        derived = study_name(cfg, cap)
        name = cfg.optimize.study_name or derived
        storage = absolute_uri(cfg.optimize.storage)
        study = open_study(cfg, name, storage, cap)  # first: a study bound to another config is refused here
        tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.artifact_root)
        predictor = Predictor(Shape.from_model(cfg.model), cfg.lora.r, list(cfg.lora.target_modules))
        made = cls(cfg, kept, cap, name, space, valid, left_out, study, storage, tracker, predictor)
        made.batches = RunBatches(cfg.optimize.fit_over)
        return made

    def knobs(self, candidate: Candidate) -> Knobs:
        """The candidate's memory knobs, on the run's longest micro-batch of it (built once a config and placement
        dtype: every fit check and prediction asks)."""
        key = (candidate.config_id, self.placement_dtype)
        if key not in self._knobs:
            batch = self.batches.longest(candidate.config) if self.batches else None
            self._knobs[key] = knobs_of(candidate.config, self.space_keys, self.placement_dtype, batch)
        return self._knobs[key]

    @cached_property
    def cuda(self) -> bool:
        return setting_of(self.cfg.train, self.cfg.model, self.cfg.gpu, 1).cuda

    def slack(self, candidate: Candidate) -> tuple[Slack, int] | None:
        """What a process of the candidate may keep reserved and unused over its peak (`pipeline.knobs.slack`), and
        the tokens of the run's longest micro-batch of it, which it is kept on; None on the CPU, which has no caching
        allocator."""
        if not self.cuda:
            return None
        knobs = self.knobs(candidate)
        varying = self.batches is not None and self.batches.first(candidate.config) is not None
        # the formula's own keys too (the compile choice), and whether the run's micro-batches vary in shape
        found = speed_knobs.slack([*knobs.values.items(), (speed_knobs.VARYING, varying)])
        return None if found is None else (found, knobs.work[0])

    def slack_bytes(self, candidate: Candidate) -> float:
        """The slack in bytes a prediction of the candidate may be over the cap by and still be measured: its slack
        where its processes were seen to keep none under a cap (`Slack.capped_fit`), else 0."""
        found = self.slack(candidate)
        if found is None or not found[0].capped_fit:
            return 0.0
        return found[0].bytes_on(found[1], self.predictor.shape.vocab)

    @cached_property
    def by_id(self) -> dict[str, Candidate]:
        return {c.config_id: c for c in self.valid}

    def candidate(self, config_id: str | None) -> Candidate | None:
        """A config the study measured: one of the space, or one beside it."""
        return self.by_id.get(config_id) or self.extra.get(config_id)

    @property
    def space_keys(self) -> list[str]:
        return list(self.space)

    @property
    def calibration(self) -> Calibration:
        return Calibration.of(self.study.user_attrs[CALIBRATION])

    def parent_params(self) -> dict[str, object]:
        base = flatten(OmegaConf.to_container(self.cfg, resolve=True))
        return {
            "study": self.name,
            "cap_gib": self.cap / GIB,
            "space": json.dumps(self.space),
            "trials": self.cfg.optimize.trials,
            "sampler": self.cfg.optimize.sampler,
            **{f"base.{k}": v for k, v in base.items() if not k.startswith("optimize.")},
        }

    def open_parent(self) -> str:
        """The study's MLflow parent run (workers that start together find or open one)."""
        with store_lock(self.storage):
            self.parent = runs.open_study(self.tracker, self.name, " ".join(self.command), self.parent_params())
        return self.parent

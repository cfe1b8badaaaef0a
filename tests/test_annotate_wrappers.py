"""Names users recognise: wrappers seen through by type, one root per model object.

In-process with the recording backend of ``test_annotate``, on real modules: DDP on a real
one-process gloo group (as ``test_annotate_ddp``), FSDP1 and ``fully_shard`` on it too,
``torch.compile`` with the eager backend, Lightning's real ``Trainer`` where lightning is
installed, and a class with the real qualified name of Lightning 2.0's
``_LightningModuleWrapperBase`` (removed in Lightning 2.1, so no installed version has it).
The rule table itself is checked against the real classes (module, qualified name, and the
attribute each stores its module in).
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = torch.distributed
nn = torch.nn
F = torch.nn.functional

from dlprof_lite.rules.names import FACT_PREFIX  # noqa: E402
from dlprof_lite.rules.wrappers import (  # noqa: E402
    DRIVES,
    SWAPS,
    WRAPPERS,
    WRAPS,
    wrapper_rules,
)
from test_annotate import Recorder, parents  # noqa: E402


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(2 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.conv(x)).flatten(1))


class Holder(nn.Module):
    """A user model with an attribute called ``module``: not a wrapper."""

    def __init__(self) -> None:
        super().__init__()
        self.module = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def train(model: nn.Module, steps: int = 2) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 3, (4,))
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def module_ranges(rec: Recorder) -> Counter[str]:
    return Counter(r.name for r in rec.ranges if r.name.startswith(("fwd:", "bwd:")))


def module_facts(rec: Recorder) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for _, text in rec.marks:
        if text.startswith(FACT_PREFIX):
            data = json.loads(text[len(FACT_PREFIX) :])
            if "module" in data:
                found.setdefault(data["module"]["layer"], data["module"])
    return found


def annotated(run: Any, *args: Any) -> None:
    from dlprof_lite.annotate import install

    annotation = install("modules-all")  # every module's ranges, none folded
    try:
        run(*args)
    finally:
        annotation.close()
        annotation.remove()


PLAIN = {"fwd:model:Net", "bwd:model:Net", "fwd:conv:Conv2d", "bwd:conv:Conv2d",
         "fwd:fc:Linear", "bwd:fc:Linear"}  # fmt: skip


def assert_plain(rec: Recorder, wrapper: str | None, steps: int = 2) -> None:
    """One plain-named range per layer and call (the wrapped model's call inside its wrapper
    pushes no second range), and the wrapper named in every layer's fact."""
    counts = module_ranges(rec)
    assert set(counts) == PLAIN, counts
    assert set(counts.values()) == {steps}, counts
    parents(rec.ranges)  # proper nesting
    facts = module_facts(rec)
    assert facts["model"]["type"] == "Net"
    assert {f["wrapper"] for f in facts.values()} == {wrapper}, facts


# --- the rule table on the real classes ------------------------------------------------


def _real(rule: Any) -> type | None:
    """The class a rule names, when its package is installed (else None)."""
    import importlib

    try:
        module = importlib.import_module(rule.module)
    except ImportError:
        return None
    cls = getattr(module, rule.qualname, None)
    return cls if isinstance(cls, type) else None


@pytest.mark.parametrize("rule", WRAPPERS, ids=lambda r: f"{r.module}.{r.qualname}")
def test_every_rule_names_a_real_class(rule: Any) -> None:
    """Each class where the installed package has it (FSDP2 moved in torch 2.6, Lightning 2.1
    removed its wrapper modules, DeepSpeed is not a test dependency)."""
    cls = _real(rule)
    if cls is None:
        pytest.skip(f"no {rule.module}.{rule.qualname} installed")
    assert cls.__qualname__ == rule.qualname
    # FSDPModule is defined in one module and shown as another: both are rules.
    assert cls.__module__ == rule.module or rule.kind == SWAPS
    assert wrapper_rules([(rule.module, rule.qualname)]) == (rule,)
    if rule.kind == WRAPS and rule.module.startswith("lightning"):
        assert set(rule.attrs) & set(cls.__init__.__code__.co_names), "stores its module there"


def test_the_torch_wrappers_store_their_module_where_the_table_says(group: Any) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import FullyShardedDataParallel

    from dlprof_lite.annotate.wrappers import inner_of, unwrapped, wrapping

    model = Net()
    made = {
        "DistributedDataParallel": nn.parallel.DistributedDataParallel(model),
        "DataParallel": nn.DataParallel(model),
        "torch.compile": torch.compile(model, backend="eager"),
        "checkpoint_wrapper": checkpoint_wrapper(model),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NO_SHARD on one rank
        made["FullyShardedDataParallel"] = FullyShardedDataParallel(
            Net(), device_id=torch.device("cpu")
        )
    for word, wrapper in made.items():
        assert wrapping(wrapper).names == (word,), word
        inner = inner_of(wrapper)
        assert isinstance(inner, Net), word
        assert unwrapped(wrapper) is inner
    assert inner_of(model) is None and wrapping(model).names == ()


def test_lightning_rules_name_the_installed_classes() -> None:
    pl = pytest.importorskip("lightning.pytorch")
    fabric = pytest.importorskip("lightning.fabric.wrappers")
    from dlprof_lite.annotate.wrappers import wrapping

    class Lit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

    kinds = {r.kind for r in wrapper_rules((c.__module__, c.__qualname__) for c in Lit.__mro__)}
    assert kinds == {DRIVES}
    assert wrapping(Lit()).names == ("Lightning",)
    assert (fabric._FabricModule.__module__, fabric._FabricModule.__qualname__) in {
        (r.module, r.qualname) for r in WRAPPERS if r.kind == WRAPS
    }
    assert "_forward_module" in fabric._FabricModule.__init__.__code__.co_names


# --- names in annotated runs -----------------------------------------------------------


def test_ddp_layers_have_no_module_prefix(recorder: Recorder, group: Any) -> None:
    def run() -> None:
        model = nn.parallel.DistributedDataParallel(Net())
        train(model)

    annotated(run)
    assert_plain(recorder, "DistributedDataParallel")


def test_fsdp1_layers_have_no_wrapped_module_prefix(recorder: Recorder, group: Any) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel

    def run() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NO_SHARD on one rank
            model = FullyShardedDataParallel(Net(), device_id=torch.device("cpu"))
        train(model)

    annotated(run)
    assert_plain(recorder, "FullyShardedDataParallel")


def test_fully_shard_keeps_plain_names_and_classes(recorder: Recorder, group: Any) -> None:
    fsdp = pytest.importorskip("torch.distributed.fsdp")
    if not hasattr(fsdp, "fully_shard"):
        pytest.skip("this torch has no fully_shard")
    from torch.distributed.device_mesh import init_device_mesh

    def run() -> None:
        model = Net()
        mesh = init_device_mesh("cpu", (1,))
        fsdp.fully_shard(model.fc, mesh=mesh)
        fsdp.fully_shard(model, mesh=mesh)
        assert type(model).__name__ == "FSDPNet"
        train(model)

    annotated(run)
    counts = module_ranges(recorder)
    assert set(counts) == PLAIN, counts
    facts = module_facts(recorder)
    assert facts["fc"]["type"] == "Linear" and facts["fc"]["wrapper"] == "fully_shard"


def test_compiled_model_is_named_as_its_model(recorder: Recorder) -> None:
    def run() -> None:
        model = torch.compile(Net(), backend="eager")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # global hooks fire for OptimizedModule too
            train(model)

    annotated(run)
    counts = module_ranges(recorder)
    assert counts["fwd:model:Net"] == 2, counts
    assert not [n for n in counts if "_orig_mod" in n]
    assert module_facts(recorder)["model"]["wrapper"] == "torch.compile"


def test_a_module_attribute_of_a_user_model_is_kept(recorder: Recorder) -> None:
    def run() -> None:
        model = Holder()
        model(torch.randn(2, 4)).sum().backward()

    annotated(run)
    assert module_ranges(recorder) == {"fwd:model:Holder": 1, "bwd:model:Holder": 1,
                                       "fwd:module:Linear": 1, "bwd:module:Linear": 1}  # fmt: skip
    assert module_facts(recorder)["module"]["wrapper"] is None


def test_lightning_2_0_wrapper_is_seen_through(recorder: Recorder, group: Any) -> None:
    """DDP around Lightning 2.0's ``_LightningModuleWrapperBase`` around the user's model,
    as its DDP strategy built it; the class is made with its real qualified name."""

    class _LightningModuleWrapperBase(nn.Module):
        def __init__(self, forward_module: nn.Module) -> None:
            super().__init__()
            self._forward_module = forward_module

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self._forward_module(x)

    base = _LightningModuleWrapperBase
    base.__module__ = "lightning.pytorch.overrides.base"
    base.__qualname__ = "_LightningModuleWrapperBase"

    def run() -> None:
        model = nn.parallel.DistributedDataParallel(base(Net()))
        train(model)

    annotated(run)
    assert_plain(recorder, "DistributedDataParallel, Lightning")


def test_lightning_trainer_layers_are_plain(recorder: Recorder) -> None:
    """The real Trainer (Lightning 2.1 on: no wrapper module on one device): the model is
    not named after the strategy's ``_lightning_module`` attribute."""
    pl = pytest.importorskip("lightning.pytorch")

    class Lit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3)
            self.fc = nn.Linear(2 * 6 * 6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(F.relu(self.conv(x)).flatten(1))

        def training_step(self, batch: Any, _index: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def run() -> None:
        data = torch.utils.data.TensorDataset(torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,)))
        trainer = pl.Trainer(max_steps=2, accelerator="cpu", devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # few workers, tiny data
            trainer.fit(Lit(), torch.utils.data.DataLoader(data, batch_size=4))

    annotated(run)
    counts = module_ranges(recorder)
    assert not [n for n in counts if "_lightning_module" in n], counts
    assert counts["fwd:conv:Conv2d"] == counts["fwd:fc:Linear"] == 2, counts
    assert module_facts(recorder)["fc"]["wrapper"] == "Lightning"


# --- one root per model object ---------------------------------------------------------


def test_a_reloaded_model_is_its_own_root(recorder: Recorder, tmp_path: Path) -> None:
    def run() -> None:
        model = Net()
        train(model)
        torch.save(model, tmp_path / "model.pt")
        model = torch.load(tmp_path / "model.pt", weights_only=False)
        train(model)

    annotated(run)
    counts = module_ranges(recorder)
    assert {n: c for n, c in counts.items() if n.startswith("fwd:")} == {
        "fwd:model:Net": 2, "fwd:conv:Conv2d": 2, "fwd:fc:Linear": 2,
        "fwd:model#2:Net": 2, "fwd:model#2.conv:Conv2d": 2, "fwd:model#2.fc:Linear": 2,
    }  # fmt: skip
    facts = module_facts(recorder)
    assert facts["model#2.fc"]["wrapper"] is None and facts["model#2"]["type"] == "Net"


def test_two_models_of_one_variable_under_ddp_are_two_roots(recorder: Recorder, group: Any) -> None:
    def run() -> None:
        for _ in range(2):
            model = nn.parallel.DistributedDataParallel(Net())
            train(model, steps=1)

    annotated(run)
    counts = module_ranges(recorder)
    assert counts["fwd:model:Net"] == counts["fwd:model#2:Net"] == 1, counts
    assert counts["fwd:fc:Linear"] == counts["fwd:model#2.fc:Linear"] == 1, counts

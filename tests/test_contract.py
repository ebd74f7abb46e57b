"""The contract in code (dlbench.contract): a framework's module that lacks a method the protocol
calls stops when it loads, naming the module or class and the method; every adapter and every
workload's framework module of the project satisfies it; each framework's code has one module
name per role.

The frameworks are not installed in the driver's environment: a module that cannot be imported
here is checked through its outline, made from its source (each class with its real bases, the
project's where they import here, and its own methods as stubs of the same signatures; each
adapter function likewise), against the contract's own check (Adapter's verify_adapter,
FrameworkPart's check as a class is defined)."""
import ast
import importlib
import inspect
import re
import sys
import textwrap
import types
from functools import cache
from pathlib import Path

import pytest

from dlbench import protocol
from dlbench.contract import Adapter, ContractError, FrameworkPart, OwnLoop, Steps, Workload, verify_adapter
from dlbench.definitions import run_sets, workload_module
from dlbench.frameworks import FRAMEWORKS, NO_FRAMEWORK, adapter_module

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
FRAMEWORKS_DIR = SRC / "dlbench" / "frameworks"
MODULES = sorted({framework.module for framework in FRAMEWORKS.values()})
# the toy workload of tests/test_new_workload.py, as it is installed there
TOY = "dlbench.workloads.toy"


# -- the outline of a module that cannot be imported here -----------------------------------------

def source_path(name):
    if name == TOY or name.startswith(TOY + "."):
        base = Path(__file__).resolve().parent / "toy_workload" / Path(*name.split(".")[3:])
    else:
        base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    raise AssertionError(f"no source of {name}")


def stub(definition, module):
    """A function of `definition`'s name and signature (defaults None, no annotations, no
    decorators), whose body is never run."""
    node = ast.FunctionDef(name=definition.name, args=definition.args, body=[ast.Expr(ast.Constant(...))],
                           decorator_list=[], returns=None, type_params=[])
    node = ast.fix_missing_locations(_plain_arguments(node))
    namespace = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), module, "exec"), namespace)
    return namespace[definition.name]


def _plain_arguments(node):
    args = node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    return node


def anything(*args, **kwargs):
    """A name a module imports from elsewhere, as the outline's value of it."""


class Outline:
    """A module as its source defines it: its imports (what each name is bound to), its functions
    (stubs of the same signatures) and its classes (made again from their real bases)."""

    def __init__(self, name):
        self.name = name
        self.tree = ast.parse(source_path(name).read_text())
        self.defined = {node.name: node for node in self.tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        self.imports = {}
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = (alias.asname and alias.name or
                                                                               alias.name.split(".")[0], None)

    def member(self, name):
        if name in self.defined:
            return self.made(name)
        if name in self.imports:
            module, attribute = self.imports[name]
            return load(module) if attribute is None else member(module, attribute)
        for node in self.tree.body:  # NAME = OTHER_NAME (WORKLOAD = TheClass)
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                return self.resolve(node.value)
        raise AssertionError(f"{self.name}: no {name} in its source")

    def resolve(self, expression):
        if isinstance(expression, ast.Name):
            return self.member(expression.id)
        if isinstance(expression, ast.Attribute):
            owner = self.resolve(expression.value)
            return owner.member(expression.attr) if isinstance(owner, Outline) else getattr(owner, expression.attr)
        raise AssertionError(f"{self.name}: cannot read {ast.unparse(expression)}")

    @cache
    def made(self, name):
        node = self.defined[name]
        if isinstance(node, ast.FunctionDef):
            return stub(node, self.name)
        bases = tuple(self.resolve(base) for base in node.bases)
        body = {"__module__": self.name, "__qualname__": name}
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body[statement.name] = stub(statement, self.name)
            elif isinstance(statement, ast.Assign):
                body.update({target.id: None for target in statement.targets if isinstance(target, ast.Name)})
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                body[statement.target.id] = None
        return types.new_class(name, bases, exec_body=lambda namespace: namespace.update(body))

    def as_module(self):
        """The module's functions (stubs) and imported names, as a module object."""
        module = types.ModuleType(self.name)
        module.__dict__.update({name: anything for name in self.imports})
        module.__dict__.update({name: self.made(name) for name, node in self.defined.items()
                                if isinstance(node, ast.FunctionDef)})
        return module

    def calls_at_load(self, function, argument):
        """Whether the module calls function(argument) at its top level (as it loads)."""
        return any(isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                   and getattr(node.value.func, "id", None) == function
                   and [getattr(a, "id", None) for a in node.value.args] == [argument] for node in self.tree.body)


@cache
def load(name):
    """The module, imported where it imports here (its framework installed), else its Outline."""
    if not (name == TOY or name.startswith(TOY + ".")):
        try:
            return importlib.import_module(name)
        except ImportError:  # its framework is not installed here
            pass
    return Outline(name)


def member(module_name, name):
    module = load(module_name)
    if isinstance(module, Outline):
        return module.member(name)
    if not hasattr(module, name) and (SRC.joinpath(*module_name.split("."), name).is_dir()
                                      or SRC.joinpath(*module_name.split("."), f"{name}.py").is_file()):
        return load(f"{module_name}.{name}")  # a submodule not imported by its package
    return getattr(module, name)


def framework_part_modules():
    """Every run set's module of every framework that has one, and the toy workload's."""
    names = {workload_module(name, framework) for name in run_sets() for framework in FRAMEWORKS}
    found = sorted(name for name in names if SRC.joinpath(*name.split(".")).with_suffix(".py").is_file())
    return [*found, f"{TOY}.pytorch", f"{TOY}.jax"]


# -- a module that lacks a method stops as it loads ---------------------------------------------

@pytest.fixture
def import_from(tmp_path, monkeypatch):
    """Import a module written in tmp_path (sys.path), forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write_and_import(name, source):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return importlib.import_module(name)

    yield write_and_import
    for name in written:
        sys.modules.pop(name, None)


def adapter_source(leave_out=(), wrong=()):
    """An adapter module of every Adapter method but `leave_out`, those in `wrong` taking no arguments."""
    lines = ["from dlbench.contract import verify_adapter", ""]
    for name in sorted(Adapter.__abstractmethods__):
        if name in leave_out:
            continue
        parameters = list(inspect.signature(getattr(Adapter, name)).parameters)[1:]
        lines.append(f"def {name}({'' if name in wrong else ', '.join(parameters)}):\n    return None\n")
    return "\n".join([*lines, "verify_adapter(__name__)"])


def test_an_adapter_module_lacking_a_method_stops_as_it_loads_naming_the_module_and_the_methods(import_from):
    with pytest.raises(ContractError) as stopped:
        import_from("lacking_adapter", adapter_source(leave_out=("sync", "describe"), wrong=("teardown",)))
    message = str(stopped.value)
    assert "lacking_adapter" in message
    assert "sync(placement, pending)" in message and "describe(placement)" in message
    assert "teardown(placement)" in message  # there, but taking none of the contract's arguments
    assert "barrier" not in message and "version" not in message
    assert "lacking_adapter" not in sys.modules


def test_an_adapter_module_with_every_method_loads_and_an_optional_one_left_out_is_the_contract_s(import_from):
    module = import_from("whole_adapter", adapter_source())
    assert "configure" not in Adapter.__abstractmethods__
    assert module.configure("a spec") is None  # the Adapter's default, the module as its self
    assert verify_adapter(module) is module  # again: nothing changes


TASK = """
from dlbench.contract import OwnLoop, Steps, Workload


class Task(Workload):
    def load_data(self):
        self.n_train = 1

    def evaluate(self):
        return {}


class Methods:  # a framework's WorkloadMethods
    def predict(self, inputs):
        return inputs

    def parameter_count(self):
        return 0

    def load_weights(self, weights):
        pass

    def precision_ops(self, inputs):
        return [], False
"""


def test_a_framework_module_lacking_a_method_stops_as_it_loads_naming_the_class_and_the_methods(import_from):
    with pytest.raises(ContractError) as stopped:
        import_from("lacking_framework", TASK + """

class LackingFramework(Task, Steps):  # neither build_training, nor the step, nor Methods' model methods
    def build_model(self):
        self.model = None

    def batches(self, order, epochs):
        return iter(order)


WORKLOAD = LackingFramework
""")
    message = str(stopped.value)
    assert message.startswith("lacking_framework.LackingFramework lacks ")
    for method in ("build_training()", "train_step(batch)", "predict(inputs)", "load_weights(weights)",
                   "precision_ops(inputs)", "parameter_count()"):
        assert method in message
    assert "build_model" not in message and "batches" not in message and "load_data" not in message
    assert "lacking_framework" not in sys.modules


def test_a_framework_module_in_the_framework_s_own_loop_lacks_fit_not_the_steps(import_from):
    with pytest.raises(ContractError, match=r"own_loop_framework.OwnLoopFramework lacks fit\(clock\) "
                                            r"\(dlbench.contract.OwnLoop"):
        import_from("own_loop_framework", TASK + """

class OwnLoopFramework(Methods, Task, OwnLoop):
    def build_model(self):
        self.model = None

    def build_training(self):
        pass
""")


# What a framework class of the protocol's own loop defines (Steps)
STEPS_BODY = """    def build_model(self):
        self.model = None

    def build_training(self):
        pass

    def batches(self, order, epochs):
        return iter(order)

    def train_step(self, batch):
        return None
"""


@pytest.mark.parametrize("name, bases, problem", [
    ("contract_first", "Steps, Methods, Task", "lists its contract last among its bases"),
    ("two_contracts", "Methods, Task, Steps, OwnLoop", "one of them, not both"),
])
def test_a_framework_class_declares_one_contract_after_its_task(import_from, name, bases, problem):
    with pytest.raises(ContractError, match=f"{name}.Misdeclared: .*{problem}"):
        import_from(name, TASK + f"""

class Misdeclared({bases}):
""" + STEPS_BODY + """
    def fit(self, clock):
        pass
""")


def test_a_complete_framework_module_loads_and_its_optional_methods_are_the_contract_s(import_from):
    module = import_from("complete_framework", TASK + """

class CompleteFramework(Methods, Task, Steps):
""" + STEPS_BODY + """

WORKLOAD = CompleteFramework
""")
    workload = module.WORKLOAD(None, None, None)
    assert not isinstance(workload, OwnLoop) and workload.epoch_info(1) == {} and workload.check(None, "cpu") is None
    with pytest.raises(NotImplementedError, match="CompleteFramework: its task's epoch_info gives a learning rate"):
        workload.set_learning_rate(0.1)


# -- every framework's modules satisfy it -------------------------------------------------------

@pytest.mark.parametrize("name", sorted({*map(adapter_module, FRAMEWORKS), NO_FRAMEWORK}))
def test_every_adapter_satisfies_the_contract(name):
    module = load(name)
    if isinstance(module, Outline):  # its framework is not installed here: its functions' signatures
        assert module.calls_at_load("verify_adapter", "__name__"), f"{name} is not checked as it loads"
        module = module.as_module()
    verify_adapter(module)


def test_the_protocol_checks_the_adapter_it_loads_and_calls_optional_methods_without_asking():
    adapter = protocol.adapter_of(types.SimpleNamespace(framework=None))  # runs of no framework
    assert adapter.__name__ == NO_FRAMEWORK and adapter.configure("a spec") is None
    assert not re.search(r"hasattr\((adapter|workload)\b", inspect.getsource(protocol))  # the contract's defaults


@pytest.mark.parametrize("name", framework_part_modules())
def test_every_workload_s_framework_module_satisfies_the_contract(name):
    """Its WORKLOAD declares its contract (Steps or OwnLoop), so its class was checked when it was
    made (here, made again from its outline where its framework is not installed)."""
    workload = member(name, "WORKLOAD")
    assert issubclass(workload, Workload) and issubclass(workload, FrameworkPart), \
        f"{name}: its WORKLOAD lists no contract (Steps or OwnLoop): nothing checks it as it loads"
    keras = name.rsplit(".", 1)[1] == "keras" and ".loader." not in name
    assert issubclass(workload, OwnLoop if keras else Steps), name


# -- one module name per role -------------------------------------------------------------------

def test_each_framework_s_workload_methods_are_in_its_step_module():
    defines = {path.relative_to(FRAMEWORKS_DIR).as_posix() for path in FRAMEWORKS_DIR.rglob("*.py")
               if any(isinstance(node, ast.ClassDef) and node.name == "WorkloadMethods"
                      for node in ast.parse(path.read_text()).body)}
    assert defines == {f"{module}/step.py" for module in MODULES}
    for module in MODULES:  # the adapter's role: its __init__.py, checked as it loads
        assert Outline(f"dlbench.frameworks.{module}").calls_at_load("verify_adapter", "__name__"), module

"""The first step of loading: read YAML experiment and target files with positions, so every error names
file:line:column.

Reading is bounded: a file is at most MAX_BYTES, MAX_NODES values (counted after aliases are expanded, so an
alias bomb stops at the limit instead of filling memory), MAX_DEPTH deep and MAX_ALIASES alias uses; an alias
that points into itself is refused instead of recursing. Merge keys (`<<: *anchor`) are supported, and a value
merged in keeps the position where it is written. Problems are collected, not raised one at a time: a user
fixing a file sees all of them.
"""

from __future__ import annotations

import os
import stat

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from ..errors import InputError
from . import schema as S
# Re-exported: the commands, the suite and the tests name the error and the document by this module, the first
# step of loading; they live in .located so that no later step calls back into this one.
from .located import ExperimentError, Located, Path, dotted, locate_target  # noqa: F401

MAX_BYTES = 256 * 1024  # the largest shipped file is ~2 KB
MAX_NODES = 10_000
MAX_DEPTH = 32  # the schema nests 5 deep (target.gateway.breaker.error_rate)
MAX_ALIASES = 100
# Only files named like YAML may have their parser's complaint quoted back: it can carry a token of the file,
# and a file named by mistake (target: /etc/shadow) must never be echoed.
YAML_SUFFIXES = (".yaml", ".yml", ".json")
MERGE_TAG = "tag:yaml.org,2002:merge"
PLAIN_COLLECTIONS = ("tag:yaml.org,2002:seq", "tag:yaml.org,2002:map")


class _Refused(InputError):
    """A limit or a structural rule broken at a mark of the file."""

    def __init__(self, mark, message: str):
        super().__init__(message)
        self.mark, self.message = mark, message


def _at(file: str, mark) -> str:
    return f"{file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{file}:1:1"


try:  # libyaml's parser feeds PyYAML's composer (which we bound) ten times faster than the Python one
    from yaml.cyaml import CParser as _Parser
except ImportError:  # PyYAML built without libyaml
    from yaml.reader import Reader
    from yaml.scanner import Scanner
    from yaml.parser import Parser

    class _Parser(Reader, Scanner, Parser):
        def __init__(self, text):
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)


class _BoundedLoader(Composer, _Parser, SafeConstructor, Resolver):
    """A safe loader whose composer counts what it builds (the composer recurses once per level)."""

    def __init__(self, text: str):
        _Parser.__init__(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._nodes = self._depth = self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(self.peek_event().start_mark, f"more than {MAX_ALIASES} aliases (*name) in one "
                                                             f"file; write the values out")
            return super().compose_node(parent, index)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(self.peek_event().start_mark, f"more than {MAX_NODES:,} values in one file")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(self.peek_event().start_mark, f"nested more than {MAX_DEPTH} deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _compose(text: str, file: str, role: str):
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_node()
    except _Refused as e:
        raise ExperimentError([f"{_at(file, e.mark)}: {e.message}"]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        if "nesting depth" in str(e.problem):  # libyaml's own limit (1000) can come first while it looks ahead
            raise ExperimentError([f"{_at(file, mark)}: nested more than {MAX_DEPTH} deep"]) from None
        if file.lower().endswith(YAML_SUFFIXES):
            raise ExperimentError([f"{_at(file, mark)}: YAML syntax error: {e.problem or e.context}"]) from None
        raise ExperimentError([f"{_at(file, mark)}: not {role} file: not valid YAML (and not named "
                               f".yaml)"]) from None
    except yaml.YAMLError:
        raise ExperimentError([f"{file}:1:1: not valid YAML"]) from None
    finally:
        loader.dispose()


class _Builder:
    """Turns a composed node graph into Python values, recording positions, expanding aliases and merges."""

    def __init__(self, file: str):
        self.file = file
        self.values: dict = {}
        self.keys: dict = {}
        self.problems: list[str] = []
        self.count = 0
        self.merged = 0  # entries looked at while resolving merges (a list of aliases can repeat them)
        self.open: set[int] = set()  # nodes being built: reaching one again is a cycle
        self.constructor = yaml.SafeLoader("")

    def build(self, node, path):
        self.count += 1
        if self.count > MAX_NODES:
            raise _Refused(node.start_mark, f"the file expands to more than {MAX_NODES:,} values (aliases repeat "
                                            f"what they point to); write less, or repeat less")
        if len(path) >= MAX_DEPTH:
            raise _Refused(node.start_mark, f"nested more than {MAX_DEPTH} deep (counting what aliases expand to)")
        self.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        if node.tag not in PLAIN_COLLECTIONS:  # !!set, !!omap, !!python/...: nothing here is written so
            raise _Refused(node.start_mark, "a value this loader cannot build (YAML tags other than the core "
                                            "ones are not supported)")
        if id(node) in self.open:
            raise _Refused(node.start_mark, "an alias refers to a node that contains it (a cycle)")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(n, path + (i,)) for i, n in enumerate(node.value)]
            return self.mapping(node, path)
        finally:
            self.open.discard(id(node))

    def scalar(self, node):
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError:
            raise _Refused(node.start_mark, "a value this loader cannot build (YAML tags other than the core "
                                            "ones are not supported)") from None
        except (ValueError, OverflowError):  # Python refuses int("1" * 5000)
            raise _Refused(node.start_mark, "a number too long to read; no setting needs more than a few "
                                            "digits") from None

    def entries(self, node) -> list:
        """(key node, value node) pairs with merges resolved: keys written here win, then earlier merges."""
        own, merged = [], []
        for k_node, v_node in node.value:
            if k_node.tag != MERGE_TAG:
                own.append((k_node, v_node))
                continue
            sources = v_node.value if isinstance(v_node, yaml.SequenceNode) else [v_node]
            for src in sources:
                if not isinstance(src, yaml.MappingNode):
                    raise _Refused(src.start_mark, "<< (merge) takes a mapping or a list of mappings, usually "
                                                   "an alias such as <<: *defaults")
                if id(src) in self.open:
                    raise _Refused(src.start_mark, "an alias refers to a node that contains it (a cycle)")
                self.merged += 1 + len(src.value)
                if self.merged > MAX_NODES:
                    raise _Refused(src.start_mark, f"merges (<<) expand to more than {MAX_NODES:,} entries")
                self.open.add(id(src))
                try:
                    merged += self.entries(src)
                finally:
                    self.open.discard(id(src))
        seen = {k.value for k, _ in own if isinstance(k, yaml.ScalarNode)}
        out = list(own)
        for k_node, v_node in merged:
            name = k_node.value if isinstance(k_node, yaml.ScalarNode) else None
            if name not in seen:
                seen.add(name)
                out.append((k_node, v_node))
        return out

    def mapping(self, node, path):
        out = {}
        own = {id(k) for k, _ in node.value}
        for k_node, v_node in self.entries(node):
            where = _at(self.file, k_node.start_mark)
            if not isinstance(k_node, yaml.ScalarNode) or not isinstance(k := self.scalar(k_node), str):
                self.problems.append(f"{where}: keys must be strings")
                continue
            if k in out:
                if id(k_node) in own:
                    self.problems.append(f"{where}: {dotted(path + (k,))}: duplicate key")
                continue
            self.keys[path + (k,)] = (k_node.start_mark.line + 1, k_node.start_mark.column + 1)
            out[k] = self.build(v_node, path + (k,))
        return out


def parse_yaml(text: str, file: str, role: str = "an experiment or target") -> Located:
    root = _compose(text, file, role)
    if root is None:
        raise ExperimentError([f"{file}:1:1: the file is empty"])
    b = _Builder(file)
    try:
        data = b.build(root, ())
    except _Refused as e:
        raise ExperimentError([f"{_at(file, e.mark)}: {e.message}"]) from None
    if b.problems:
        raise ExperimentError(b.problems)
    return Located(file, data, b.values, b.keys)


def read_file(path: str, role: str = "an experiment or target") -> Located:
    """A regular file of at most MAX_BYTES, read and parsed; anything else is refused without reading it."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ExperimentError([f"{path}: not a regular file; give an experiment or target file"])
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ExperimentError([f"{path}: no such file"]) from None
    except OSError as e:
        raise ExperimentError([f"{path}: cannot read: {e.strerror or e}"]) from None
    if len(raw) > MAX_BYTES:
        line = raw[:MAX_BYTES].count(b"\n") + 1
        raise ExperimentError([f"{path}:{line}:1: the file passes the {MAX_BYTES // 1024} KiB limit of experiment "
                               f"and target files here (it is at least {len(raw):,} bytes)"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ExperimentError([f"{path}:{line}:1: not UTF-8 text (byte {e.start}); experiment and target files "
                               f"are UTF-8 YAML"]) from None
    return parse_yaml(text, path, role)


EXPERIMENT_KEYS = ("name", "target", "load")


def is_target(data) -> bool:
    return isinstance(data, dict) and "kind" in data


def read_experiment(path: str) -> Located:
    """An experiment file read, or refused when it is not one (a target file named by mistake gets a hint)."""
    doc = read_file(path, role="an experiment")
    if not isinstance(doc.data, dict) or not any(k in doc.data for k in EXPERIMENT_KEYS):
        hint = " (this is a target file: name it from an experiment with target: FILE)" if is_target(
            doc.data) else ""
        raise ExperimentError([f"{path}:1:1: not an experiment file: an experiment is a YAML mapping with "
                               f"name:, target: and load: at its top level{hint}"])
    return doc


def read_target(path_or_doc) -> Located:
    """A target file read (or one already read), or refused when it is not one."""
    doc = read_file(path_or_doc, role="a target") if isinstance(path_or_doc, str) else path_or_doc
    if not is_target(doc.data):
        # Never quote what the file holds: it may be any file at all (target: /etc/shadow).
        raise ExperimentError([f"{doc.file}:1:1: not a target file: a target file is a YAML mapping with kind: "
                               f"({', '.join(sorted(S.TARGET_KINDS))}) at its top level"])
    return doc


def read_named_target(doc: Located, ref: str, overridden: bool) -> Located:
    """The target file an experiment names (or the one given to run it against instead), found beside the
    experiment or in the current directory, read."""
    path = doc.file
    found = locate_target(ref, path)
    if found is None and overridden:
        raise ExperimentError([f"target file {ref!r} not found (given to run {path} against; looked in the "
                               f"current directory and beside the experiment)"])
    if found is None:
        raise ExperimentError([doc.problem(("target",), f"target file {ref!r} not found (looked beside "
                                                        f"{path} and in the current directory)")])
    return read_target(found)

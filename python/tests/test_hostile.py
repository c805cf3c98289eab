"""Hostile input through the Python package (issue 44): JSON schemas that
overflowed the stack (a pattern nesting 10,000 groups, an anyOf that
recurses with no base case) and chat templates over their budget (values
that double forty times, text far larger than its value) each raise a
ferrite exception naming the problem; the interpreter carries on and the
same Generator still works. On main the schemas ended the interpreter
(exit 139) and the list-doubling template used all memory."""

import shutil

import pytest

import ferrite

from conftest import TESTDATA

TINY = TESTDATA / "hf-decoders" / "tiny-llama"


@pytest.fixture(scope="module")
def tiny():
    return ferrite.Generator(TINY, threads=1)


def _works(gen):
    """A short greedy completion still comes back as text."""
    out = gen.complete("Once upon", max_tokens=3, temperature=0)
    assert isinstance(out, str)


def test_a_pattern_nesting_10000_groups_is_refused(tiny):
    deep = "(" * 10_000 + "a" + ")" * 10_000
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": deep}}}
    with pytest.raises(ferrite.InputError) as e:
        tiny.complete("x", max_tokens=4, json_schema=schema)
    message = str(e.value)
    assert "'pattern'" in message and "nests groups deeper than 64" in message, message
    assert "#/properties/a" in message, message
    _works(tiny)


@pytest.mark.parametrize(
    "defs, want",
    [
        # Only itself: its values would never start.
        ({"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "left recursion"),
        # Itself first, a base case after: still left recursion.
        ({"a": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/a"}]}}, "left recursion"),
        # Through non-empty arrays with no way out: no finite value.
        (
            {"a": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}]}},
            "no value of the schema at #/$defs/a",
        ),
    ],
)
def test_a_recursive_anyof_without_a_way_out_is_refused(tiny, defs, want):
    schema = {
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/a"}},
        "required": ["v"],
        "$defs": defs,
    }
    with pytest.raises(ferrite.InputError, match="json_schema") as e:
        tiny.chat([{"role": "user", "content": "Hi"}], max_tokens=4, json_schema=schema)
    assert want in str(e.value), str(e.value)
    _works(tiny)


HOSTILE_TEMPLATES = [
    # A list doubled forty times (minijinja builds 2^33 items at once).
    "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
    "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
    # A string doubled forty times.
    "{% set ns = namespace(s='a') %}{% for i in range(40) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    # A thousand references to a 1 MB string, written out: a gigabyte.
    "{% set s = 'x' * 1000000 %}{% set d = [s] * 1000 %}{{ d|string|length }}",
]


@pytest.mark.parametrize("template", HOSTILE_TEMPLATES)
def test_a_template_over_its_budget_is_a_model_error(tmp_path, template):
    model = tmp_path / "tiny-llama"
    shutil.copytree(TINY, model)
    (model / "chat_template.jinja").write_text(template)
    gen = ferrite.Generator(model, threads=1)
    assert gen.has_chat_template
    with pytest.raises(ferrite.ModelError, match="budget"):
        gen.chat([{"role": "user", "content": "Hi"}], max_tokens=4)
    _works(gen)


def test_an_overlapping_one_of_is_refused(tiny):
    schema = {"type": "object", "properties": {"n": {"oneOf": [{"type": "number"},
                                                               {"type": "integer"}]}}}
    with pytest.raises(ferrite.InputError, match="'oneOf' branches 0 and 1") as e:
        tiny.complete("x", max_tokens=4, json_schema=schema)
    assert "#/properties/n" in str(e.value), str(e.value)
    _works(tiny)

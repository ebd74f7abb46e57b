"""The report's captions (every report/*.rst, and each workload's and study's) name only config
keys, wildcards and params that exist: Snakemake renders them with Jinja2, whose default leaves
an unknown name empty without a word, so a renamed key would silently blank a sentence."""
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest

from dlbench.config import load_config

REPO = Path(__file__).resolve().parents[1]
CAPTIONS = sorted([*(REPO / "report").glob("*.rst"), *(REPO / "src" / "dlbench").glob("*/*/report/*.rst")])
CONFIGS = {"default": [REPO / "config.yaml"], "smoke": [REPO / "config.yaml", REPO / "presets" / "smoke.yaml"]}


@cache
def config_of(name):
    return load_config(*CONFIGS[name])


class Strict(SimpleNamespace):
    """Attributes that exist, else an error naming the one asked for (wildcards, params)."""

    def __getattr__(self, name):
        raise AttributeError(f"no {name!r}: the caption names what the rule does not have")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("caption", CAPTIONS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_caption_names_only_what_the_config_and_its_rule_have(caption, config):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    template = env.from_string(caption.read_text())
    snakemake = SimpleNamespace(config=config_of(config), wildcards=Strict(run_set="mnist"),
                                params=Strict())
    text = template.render(snakemake=snakemake, files=[])
    assert text.strip()


def test_an_unknown_key_in_a_caption_fails_here():
    """The check above can fail: a caption naming a key the config lacks raises."""
    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string('{{ snakemake.config["device"] }}')
    with pytest.raises(jinja2.UndefinedError):
        template.render(snakemake=SimpleNamespace(config=load_config(REPO / "config.yaml")))

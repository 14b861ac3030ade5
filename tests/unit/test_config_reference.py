"""The YAML reference is generated from the config models: it names every field the loader
accepts, each with a description, and the committed page is the generator's output."""
from pathlib import Path

from tideline.core.config_reference import fields, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "pipeline-yaml.md"


def test_every_field_is_described():
    assert [f.path for f in fields() if not f.description] == []


def test_the_committed_reference_is_what_the_models_say():
    assert PAGE.read_text() == render(), ("docs/reference/pipeline-yaml.md drifted from the config models: run "
                                          "`python -m tideline.core.config_reference > docs/reference/pipeline-yaml.md`")


def test_the_reference_names_what_the_old_hand_written_one_left_out():
    text = PAGE.read_text()
    for path in ("target.kind", "maintenance.target_file_mb", "connect.retry_minutes", "stream.checkpoint_dir",
                 "tables[].snapshot"):
        assert f"`{path}`" in text, path

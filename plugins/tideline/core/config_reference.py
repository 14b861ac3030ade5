"""The pipeline YAML reference, generated from the config models themselves (core.config,
core.settings): every field with its type, default and description, so the reference cannot
drift from what the loader accepts. `python -m tideline.core.config_reference` prints it;
docs/reference/pipeline-yaml.md is its output, and a unit test fails when the two differ or a
field has no description."""
from __future__ import annotations

import typing
from dataclasses import dataclass

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

HEADER = """# Pipeline YAML reference

Generated from the config models (`python -m tideline.core.config_reference > docs/reference/pipeline-yaml.md`);
a test fails when it differs from them. One YAML file per pipeline in `pipelines/`, the file name
is the pipeline's name; `pipelines/README.md` shows a whole file with comments. A field not listed
here is refused when the file is read, naming the file, the line and the field.
"""


@dataclass(frozen=True)
class Field:
    path: str
    type: str
    default: str
    description: str | None


def _model_in(annotation) -> tuple[type[BaseModel] | None, bool]:
    """(the model a field holds, whether as a list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], True
    for a in args:
        found = _model_in(a)
        if found[0] is not None:
            return found
    return None, False


def _type(annotation) -> str:
    text = str(annotation).replace("typing.", "").replace("NoneType", "null").replace("None", "null")
    for prefix in ("<class '", "'>"):
        text = text.replace(prefix, "")
    return text.replace("Literal", "one of ").replace("tideline.core.settings.", "").replace(
        "tideline.core.config.", "")


def _default(info) -> str:
    if info.default is not PydanticUndefined:
        return "required" if info.default is ... else f"`{_yaml(info.default)}`"
    if info.default_factory is not None:
        value = info.default_factory()
        return "see below" if isinstance(value, BaseModel) else f"`{_yaml(value)}`"
    return "required"


def _yaml(value) -> str:
    """A default as YAML writes it."""
    import json
    return value if isinstance(value, str) else json.dumps(value)


def fields(model: type[BaseModel] = None, prefix: str = "") -> list[Field]:
    """Every field of the pipeline config, depth first, as YAML paths (`tables[].name`)."""
    if model is None:
        from tideline.core.config import PipelineConfig
        model = PipelineConfig
    out = []
    for name, info in model.model_fields.items():
        alias = info.alias or (info.validation_alias.choices[0] if hasattr(info.validation_alias, "choices")
                               else info.validation_alias) or name
        path = f"{prefix}{alias}"
        sub, many = _model_in(info.annotation)
        if sub is not None:
            out.append(Field(path + ("[]" if many else ""), "list of tables" if many else "section",
                             _default(info), info.description or _first_paragraph(sub.__doc__)))
            out += fields(sub, f"{path}[]." if many else f"{path}.")
        else:
            out.append(Field(path, _type(info.annotation), _default(info), info.description))
    return out


def _first_paragraph(doc: str | None) -> str | None:
    return " ".join((doc or "").strip().split("\n\n")[0].split()) or None


def render() -> str:
    rows = ["| field | type | default | what it does |", "| --- | --- | --- | --- |"]
    for f in fields():
        what = (f.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{f.path}` | {f.type.replace('|', 'or')} | {f.default.replace('|', 'or')} | {what} |")
    return HEADER + "\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render(), end="")

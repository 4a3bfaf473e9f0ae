"""The request's fields and the command line agree: each JobSpec field is an option of run/launch (its
variable and default in --help, the default parsing back to the field's), no request option lacks a field,
the previews' options are the same fields, and the manager manifest sets only variables that are read."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from distributetrain.cli import main
from distributetrain.errors import EXIT_USAGE, InvalidInput
from distributetrain.request import jobspec
from distributetrain.request.fields import RequestField
from distributetrain.request.jobspec import FIELDS, JobRef, JobSpec

ROOT = Path(__file__).resolve().parents[2]
# What run/launch/posttraining take besides the request: where the cluster is, how to show the result.
NOT_FIELDS = {"--kubeconfig", "--context", "--dry-run", "--output", "--quiet", "--help"}
# What plan/inventory take besides request fields.
NOT_FIELDS_OF_PREVIEWS = {"--cluster", "--free", "--json", "--kubeconfig", "--context", "--help"}


def help_lines(command: str) -> dict[str, str]:
    """`distributetrain COMMAND --help`, the text of each option (wide enough not to wrap), by long option."""
    result = CliRunner().invoke(main, [command, "--help"], terminal_width=1000, max_content_width=1000)
    assert result.exit_code == 0, result.output
    options = result.stdout.split("Options:\n", 1)[1]
    lines: dict[str, str] = {}
    option = ""
    for line in options.splitlines():
        found = re.match(r"  (?:-\w, )?(--[\w-]+)", line)
        if found:
            option = found.group(1)
            lines[option] = line
        elif option and line.startswith("   "):  # a long option's help starts on the next line
            lines[option] += line
        else:
            option = ""
    return lines


@pytest.mark.parametrize("command", ["run", "launch", "posttraining"])
def test_every_field_is_an_option_with_its_variable_and_default(command: str) -> None:
    lines = help_lines(command)
    assert set(lines) - NOT_FIELDS == {spec_field.option for spec_field in FIELDS}
    for spec_field in FIELDS:
        line = lines[spec_field.option]
        assert f"[env {spec_field.env}" in line, line
        if spec_field.required:
            assert "; required]" in line, line
        elif spec_field.default_text is not None:
            assert f"; default {spec_field.default_text}]" in line, line
        assert spec_field.help in line


def test_no_two_fields_share_an_option() -> None:
    names = [name for spec_field in FIELDS for name in (spec_field.option, spec_field.short) if name]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("spec_field", FIELDS, ids=lambda spec_field: spec_field.name)
def test_the_default_shown_parses_back_to_the_default(spec_field: RequestField) -> None:
    if spec_field.default_text is not None:
        assert spec_field.parse(spec_field.default_text) == spec_field.default
    else:
        assert spec_field.required or spec_field.default in (None, ())


def test_defaults_shown_as_a_user_types_them() -> None:
    shown = {spec_field.name: spec_field.default_text for spec_field in FIELDS}
    assert (shown["schedule_timeout"], shown["replace_timeout"], shown["wait_for_gpus"]) == ("5m", "10m", "0")
    assert (shown["memory_per_gpu"], shown["shm_size"], shown["cpu_per_gpu"]) == ("8Gi", "1Gi", "2")
    assert (shown["keep_chief"], shown["preflight"], shown["gpus"], shown["topology_key"]) == ("on", "off",
                                                                                            None, None)


@pytest.mark.parametrize("command", ["plan", "inventory"])
def test_the_previews_request_options_are_the_fields(command: str) -> None:
    """plan and inventory read no variables, but each of their request options is the field's own."""
    by_option = {spec_field.option: spec_field for spec_field in FIELDS}
    group_command = main.commands[command]
    for param in group_command.params:
        if not isinstance(param, click.Option):
            continue
        option = next(name for name in param.opts if name.startswith("--"))
        if option in NOT_FIELDS_OF_PREVIEWS:
            continue
        assert option in by_option, f"{command} {option}: no request field has this option"
        spec_field = by_option[option]
        assert param.help == spec_field.help and param.metavar == spec_field.metavar
        assert param.required == spec_field.required
        default = () if spec_field.multiple else spec_field.default_text
        assert spec_field.required or param.default == default


def test_the_manager_manifest_sets_only_variables_that_are_read() -> None:
    """A misspelt DT_* in the manifest would be ignored in silence: every one is a field's or the manager's
    own identity, and the args are request options."""
    text = (ROOT / "manifests" / "DistributeTrain_Manager.yaml").read_text()
    manager = next(doc for doc in yaml.safe_load_all(text) if doc and doc.get("kind") == "Job")
    container = manager["spec"]["template"]["spec"]["containers"][0]
    identity = {jobspec.ENV_MANAGER_POD_NAME, jobspec.ENV_MANAGER_POD_UID, jobspec.ENV_MANAGER_NAMESPACE,
                jobspec.ENV_MANAGER_POD_IPS, jobspec.ENV_MANAGER_JOB_NAME, jobspec.ENV_MANAGER_JOB_UID}
    named = set(re.findall(r"name: (DT_\w+)", text))  # the commented-out examples too
    assert {e["name"] for e in container["env"]} <= named
    assert named - identity <= {spec_field.env for spec_field in FIELDS}
    options = {spec_field.option for spec_field in FIELDS}
    assert {word for word in container["args"] if word.startswith("--")} <= options


def test_job_ref_reads_name_and_namespace_as_the_request_does() -> None:
    ref = JobRef.from_sources({"job_name": "a", "namespace": None}, {"DT_NAMESPACE": "ml"})
    assert ref == JobRef("a", "ml")
    assert JobRef.from_sources({}, {"DT_JOB_NAME": "b"}) == JobRef("b", "default")
    assert JobRef.from_sources({}, {}) == JobRef("distributetrain", "default")
    spec = JobSpec.from_sources({"gpus": "1", "image": "train:1"}, {"DT_JOB_NAME": "b", "DT_NAMESPACE": "ml"})
    assert spec.ref == JobRef.from_sources({}, {"DT_JOB_NAME": "b", "DT_NAMESPACE": "ml"})
    with pytest.raises(InvalidInput) as caught:
        JobRef.from_sources({"job_name": "a" * 41, "namespace": "Bad_NS"}, {}, name_given_as="JOB")
    assert caught.value.exit_code == EXIT_USAGE
    message = str(caught.value)
    assert "job_name (JOB): " in message and "at most 40 characters" in message
    assert "namespace (--namespace): 'Bad_NS' is not a namespace name" in message
    with pytest.raises(InvalidInput, match="job_name: required; give JOB or set DT_JOB_NAME; list jobs "):
        JobRef.from_sources({}, {}, name_required=True, name_given_as="JOB")


@pytest.mark.parametrize(("args", "env", "fragment"), [
    (["status"], {}, "job_name: required; give JOB or set DT_JOB_NAME"),
    (["status", "a" * 41], {}, "job_name (JOB): "),
    (["logs"], {"DT_JOB_NAME": "Not_A_Name"}, "job_name (DT_JOB_NAME): 'Not_A_Name'"),
    (["delete", "train", "-n", "Bad_NS"], {}, "namespace (--namespace): 'Bad_NS'"),
    (["wait", "train"], {"DT_NAMESPACE": "-ns"}, "namespace (DT_NAMESPACE): '-ns'"),
    (["wait", "train", "--no-keep-chief"], {"DT_NAMESPACE": ""}, "namespace (DT_NAMESPACE)"),
    (["posttraining"], {"DT_JOB_NAME": "a" * 41}, "job_name (DT_JOB_NAME): "),
    (["posttraining"], {"DT_KEEP_CHIEF": "maybe"}, "keep_chief (DT_KEEP_CHIEF): 'maybe' is not true"),
])
def test_job_commands_check_the_job_before_connecting(args: list[str], env: dict[str, str],
                                                      fragment: str) -> None:
    result = CliRunner(env={"DT_JOB_NAME": None, "DT_NAMESPACE": None, "DT_KEEP_CHIEF": None, **env}).invoke(
        main, [*args, "--kubeconfig", str(ROOT / "no-such-kubeconfig")])
    assert result.exit_code == EXIT_USAGE, result.output
    assert fragment in result.stderr

"""Validation with TabbyAPI's rules, saving safely, migration, finding an install."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from conftest import MODELS, TABBY
from specdeck.core import config
from specdeck.core.atomic import WriteError
from specdeck.core.config import DRAFT, MODEL, ConfigDocument, Layout
from specdeck.core.config.document import ConfigError
from specdeck.core.errors import InvalidInputError, NotFoundError, SpecDeckError

EXL2 = TABBY / "config_sample.exl2-checkpoint.yml"
LEGACY = TABBY / "config_sample.581e1fc.yml"
MAIN = TABBY / "config_sample.f1f2c85.yml"


def writable_copy(tmp_path, sample=EXL2, name="config.yml"):
    path = tmp_path / name
    path.write_bytes(sample.read_bytes())
    return path


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ((DRAFT, "draft_cache_mode"), "Q5", "one of FP16, Q8, Q6, Q4"),
        ((DRAFT, "draft_cache_mode"), "8,8", "one of FP16, Q8, Q6, Q4"),
        ((DRAFT, "draft_rope_alpha"), "auto", "a number"),
        ((DRAFT, "draft_rope_alpha"), "-1", "below 0"),
        ((DRAFT, "draft_gpu_split"), "8,lots", "'lots' is not a number"),
        ((DRAFT, "draft_num_tokens"), "2.5", "a whole number"),
        ((DRAFT, "draft_num_tokens"), "0", "at least 1"),
        ((DRAFT, "draft_mode"), "eagle", "one of model, disabled, mtp, ngram"),
        ((MODEL, "cache_size"), "1000", "multiple of 256"),
        ((MODEL, "max_seq_len"), "-2", "at least -1"),
        ((MODEL, "gpu_split_auto"), "maybe", "true or false"),
    ],
)
def test_invalid_values_are_refused_with_the_rule(key, value, words):
    doc = config.load(EXL2)
    with pytest.raises(InvalidInputError) as err:
        config.plan_change(doc, {key: value})
    message = str(err.value)
    assert f"{key[0]}.{key[1]}" in message and words in message


def test_exl3_cache_pair_only_for_the_main_cache_and_not_on_exllamav2():
    doc = config.load(MAIN)
    change = config.plan_change(doc, {(MODEL, "cache_mode"): "8, 6"})
    assert ConfigDocument(change.new_text).raw(MODEL, "cache_mode") == "8,6"
    declared = ConfigDocument("model:\n  backend: exllamav2\n  cache_mode: FP16\n")
    with pytest.raises(InvalidInputError, match="cache_mode"):
        config.plan_change(declared, {(MODEL, "cache_mode"): "8,8"})


def test_values_typed_by_users_are_normalised():
    doc = config.load(EXL2)
    change = config.plan_change(doc, {(DRAFT, "draft_cache_mode"): " q8 ", (DRAFT, "draft_mode"): "NGRAM"})
    after = ConfigDocument(change.new_text)
    assert after.raw(DRAFT, "draft_cache_mode") == "Q8"
    assert after.raw(DRAFT, "draft_mode") == "ngram"


def test_file_problems_follow_tabbyapi():
    text = (
        "model:\n  max_seq_len: 8192\n  cache_size: 4096\n  cache_mode: q4\n  backend: exllamav2\n"
        "  gpu_split: [20, 24]\ndraft_model:\n  draft_model_dir: /nonexistent\n"
        "  draft_model_name: Tiny\n  draft_gpu_split: 8\n  draft_num_tokens: 6\n"
    )
    problems = ConfigDocument(text).problems()
    by_key = {(p.severity, ".".join(p.path) if p.path else None) for p in problems}
    assert ("error", "model.cache_size") in by_key  # cache_size < max_seq_len
    assert ("error", "model.cache_mode") in by_key  # lower case q4
    assert ("error", "draft_model.draft_gpu_split") in by_key  # not a list
    assert ("warning", "draft_model.draft_model_name") in by_key  # folder missing
    assert ("info", "draft_model.draft_num_tokens") in by_key  # ignored by ExLlamaV2
    assert ("info", "model.gpu_split") in by_key  # ignored with autosplit on


def test_samples_have_no_errors():
    for sample in TABBY.glob("*.yml"):
        assert config.load(sample).errors() == [], sample.name


def test_backend_detected_from_target_model(tmp_path):
    models = tmp_path / "models"
    target = models / "Big-exl2"
    target.mkdir(parents=True)
    (target / "config.json").write_text('{"quantization_config": {"quant_method": "exl2"}}')
    path = tmp_path / "config.yml"
    path.write_text("model:\n  model_dir: models\n  model_name: Big-exl2\n")
    doc = config.load(path)
    assert doc.target_model_path() == target
    assert doc.backend_hint() == "exllamav2"


def test_invalid_yaml_reports_line_and_column_and_writes_nothing(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("model:\n  model_name: x\n draft_model: [\n")
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=r"line 3, column \d+"):
        config.load(path)
    assert path.read_bytes() == before


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping of sections"):
        config.load(path)


def test_missing_file_and_not_utf8(tmp_path):
    with pytest.raises(NotFoundError, match="create one"):
        config.load(tmp_path / "config.yml")
    bad = tmp_path / "latin1.yml"
    bad.write_bytes("model:\n  model_name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.load(bad)


# -- saving ------------------------------------------------------------------------------


def test_disk_full_in_the_middle_of_a_save_leaves_the_original(tmp_path, monkeypatch):
    path = writable_copy(tmp_path)
    before = path.read_bytes()
    change = config.plan_change(config.load(path), {(DRAFT, "draft_model_name"): "Small"})
    real_fsync = os.fsync

    def failing_fsync(fd):
        # The backup is written first; the disk fills up while the new config.yml is.
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(".config.yml.") and not name.startswith(".config.yml.bak."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(WriteError, match="No space left on device.*original file is unchanged"):
        config.save(change)
    assert path.read_bytes() == before
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("config.yml", "config.yml.bak")]
    assert leftovers == []


def test_conflict_when_changed_on_disk(tmp_path):
    path = writable_copy(tmp_path)
    doc = config.load(path)
    change = config.plan_change(doc, {(DRAFT, "draft_model_name"): "Small"})
    path.write_text(path.read_text() + "\n# edited by hand\n")
    with pytest.raises(config.ConfigConflictError, match="changed by another program"):
        config.save(change)
    assert path.read_text().endswith("# edited by hand\n")
    result = config.save(change, force=True)
    assert result.written
    assert config.backup_path(path).read_text().endswith("# edited by hand\n")
    path.unlink()
    with pytest.raises(config.ConfigConflictError, match="was deleted"):
        config.save(change)


def test_read_only_file_is_left_alone(tmp_path):
    path = writable_copy(tmp_path)
    path.chmod(0o444)
    before = path.read_bytes()
    change = config.plan_change(config.load(path), {(DRAFT, "draft_model_name"): "Small"})
    with pytest.raises(WriteError, match="read-only"):
        config.save(change)
    assert path.read_bytes() == before


def test_permissions_kept_and_symlink_followed(tmp_path):
    real = writable_copy(tmp_path, name="real-config.yml")
    real.chmod(0o640)
    link = tmp_path / "config.yml"
    link.symlink_to(real)
    change = config.plan_change(config.load(link), {(DRAFT, "draft_cache_mode"): "Q4"})
    config.save(change)
    assert link.is_symlink()
    assert config.load(real).raw(DRAFT, "draft_cache_mode") == "Q4"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert stat.S_IMODE(config.backup_path(real).stat().st_mode) == 0o640


def test_a_symlinked_backup_is_refused_and_its_target_untouched(tmp_path):
    path = writable_copy(tmp_path)
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's notes\n")
    config.backup_path(path).symlink_to(precious)
    before = path.read_bytes()
    change = config.plan_change(config.load(path), {(DRAFT, "draft_model_name"): "Small"})
    with pytest.raises(WriteError, match="symbolic link.*precious.txt") as info:
        config.save(change)
    assert "Remove or rename config.yml.bak" in info.value.fix
    assert precious.read_text() == "the user's notes\n"
    assert path.read_bytes() == before
    assert config.backup_path(path).is_symlink()


def test_a_backup_slot_that_is_a_folder_is_refused(tmp_path):
    path = writable_copy(tmp_path)
    config.backup_path(path).mkdir()
    change = config.plan_change(config.load(path), {(DRAFT, "draft_model_name"): "Small"})
    with pytest.raises(WriteError, match="not a plain file"):
        config.save(change)
    assert config.load(path).value(DRAFT, "draft_model_name") is None


root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="giving files to another user needs root")


@root_only
def test_root_saving_a_service_users_file_keeps_owner_group_and_mode(tmp_path):
    path = writable_copy(tmp_path)
    os.chown(path, 65534, 65534)  # the service user, say
    path.chmod(0o640)
    change = config.plan_change(config.load(path), {(DRAFT, "draft_cache_mode"): "Q4"})
    config.save(change)
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o640)
    bak = config.backup_path(path).stat()
    assert (bak.st_uid, bak.st_gid, stat.S_IMODE(bak.st_mode)) == (65534, 65534, 0o640)
    assert config.load(path).raw(DRAFT, "draft_cache_mode") == "Q4"


@root_only
def test_a_user_who_cannot_keep_the_owner_is_refused_before_anything_is_written():
    """nobody may write root's world-writable file, but a saved copy would be nobody's."""
    import shutil
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="specdeck-owner-"))  # pytest's tmp is root-only
    folder.chmod(0o777)
    try:
        _refused_as_nobody(folder)
    finally:
        shutil.rmtree(folder)


def _refused_as_nobody(folder):
    path = writable_copy(folder)
    path.chmod(0o666)
    before = path.read_bytes()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child becomes 'nobody' and tries to save
        os.close(read)
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            change = config.plan_change(config.load(path), {(DRAFT, "draft_cache_mode"): "Q4"})
            try:
                config.save(change)
                os.write(write, b"saved")
            except WriteError as exc:
                os.write(write, str(exc).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write, repr(exc).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    assert "belongs to root" in message and "Nothing was changed" in message, message
    assert path.read_bytes() == before
    assert path.stat().st_uid == 0
    assert sorted(p.name for p in folder.iterdir()) == ["config.yml"]


def test_create_from_defaults(tmp_path):
    from specdeck.core.changed import TABBY_CONFIG, FileChanged

    path = tmp_path / "config.yml"
    assert config.create_config(path) == FileChanged(path, TABBY_CONFIG)
    doc = config.load(path)
    assert doc.errors() == []
    assert doc.layout is Layout.DRAFT_MODEL
    for s in config.SETTINGS:
        assert doc.has(*s.path)
        assert doc.value(*s.path) == s.default
    with pytest.raises(InvalidInputError, match="will not overwrite"):
        config.create_config(path)


def test_create_from_a_sample_copies_it_and_refuses_what_is_not_a_config(tmp_path):
    """A copy of TabbyAPI's config_sample.yml, byte for byte (the Draft settings page offers
    it); a sample read as a config is (a FIFO is not waited on, a file of a config's cap is
    refused, YAML that is not a config is refused) and nothing is written then."""
    from specdeck.core.changed import TABBY_CONFIG, FileChanged
    from specdeck.core.files import CONFIG_FILE

    sample = MAIN
    path = tmp_path / "config.yml"
    assert config.create_config(path, sample) == FileChanged(path, TABBY_CONFIG)
    assert path.read_bytes() == sample.read_bytes()
    with pytest.raises(InvalidInputError, match="will not overwrite"):
        config.create_config(path, sample)
    pipe = tmp_path / "sample.fifo"
    os.mkfifo(pipe)
    huge = tmp_path / "huge.yml"
    huge.write_bytes(b"#" * (CONFIG_FILE + 1))
    broken = tmp_path / "broken.yml"
    broken.write_text("model: [unclosed\n")
    for bad in (pipe, huge, broken):
        target = tmp_path / f"from-{bad.name}.yml"
        with pytest.raises(SpecDeckError):
            config.create_config(target, bad)
        assert not target.exists()


# -- migration ---------------------------------------------------------------------------


def tabby_migration(data: dict) -> dict:
    """TabbyAPI's own migration (common/tabby_config.py), restated for the test."""
    import copy

    cfg = copy.deepcopy(data)
    model = cfg.get("model") or {}
    if model.get("draft"):
        cfg["draft_model"] = model["draft"]
        del model["draft"]
    if model.get("lora"):
        cfg["lora"] = model["lora"]
        del model["lora"]
    logging_cfg = cfg.get("logging") or {}
    for key in [k for k in logging_cfg if not k.startswith("log_")]:
        logging_cfg[f"log_{key}"] = logging_cfg.pop(key)
    return cfg


def test_legacy_sample_migrates_like_tabbyapi_and_keeps_comments(tmp_path):
    path = writable_copy(tmp_path, LEGACY)
    doc = config.load(path)
    migration = config.plan_migration(doc)
    assert migration.steps == ("model.draft -> draft_model",)
    after = ConfigDocument(migration.new_text)
    assert after.layout is Layout.DRAFT_MODEL
    assert after.data == tabby_migration(doc.data)
    old_comments = sorted(line.strip() for line in doc.text.splitlines() if line.strip().startswith("#"))
    new_comments = sorted(line.strip() for line in migration.new_text.splitlines() if line.strip().startswith("#"))
    assert new_comments == old_comments
    assert "\n\n\n" not in migration.new_text
    config.save(migration)
    assert config.backup_path(path).read_bytes() == LEGACY.read_bytes()
    assert config.plan_migration(config.load(path)).is_noop


def test_migration_in_the_middle_and_with_lora_and_logging():
    text = (
        "model:\n  model_name: Big\n\n  # the draft\n  draft:\n    draft_model_name: Small  # 1B\n"
        "\n  lora:\n    lora_dir: loras\n  cache_mode: Q4\n\n"
        "logging:\n  prompt: false\n  log_requests: true\n\nnetwork:\n  port: 5000\n"
    )
    doc = ConfigDocument(text)
    migration = config.plan_migration(doc)
    assert set(migration.steps) == {"model.draft -> draft_model", "model.lora -> lora",
                                    "logging.prompt -> logging.log_prompt"}
    after = ConfigDocument(migration.new_text)
    assert after.data == tabby_migration(doc.data)
    assert "# the draft\ndraft_model:\n  draft_model_name: Small  # 1B\n" in migration.new_text
    assert migration.new_text.index("draft_model:") < migration.new_text.index("logging:")


def test_migration_refuses_ambiguous_files():
    text = "model:\n  draft:\n    draft_model_name: A\ndraft_model:\n  draft_model_name: B\n"
    with pytest.raises(InvalidInputError, match="both model.draft and a top-level draft_model"):
        config.plan_migration(ConfigDocument(text))


# -- TabbyAPI installs -------------------------------------------------------------------


def test_find_install_and_model_overrides(tmp_path):
    tabby = tmp_path / "tabbyAPI"
    (tabby / "backends" / "exllamav2").mkdir(parents=True)
    (tabby / "main.py").write_text("# TabbyAPI\n")
    (tabby / "config_sample.yml").write_bytes(EXL2.read_bytes())
    install = config.find_install(tabby)
    assert install.has_exllamav2_backend and not install.config_exists
    assert install.sample is not None

    (tabby / "config.yml").write_text("model:\n  model_dir: models\n  model_name: Llama-2-7b-hf\n")
    target = tabby / "models" / "Llama-2-7b-hf"
    target.mkdir(parents=True)
    (target / "config.json").write_bytes((MODELS / "Llama-2-7b-hf" / "config.json").read_bytes())
    (target / "tabby_config.yml").write_text(
        "model:\n  max_seq_len: 4096\ndraft_model:\n  draft_model_name: TinyLlama\n"
    )
    doc = config.load(config.find_install(tabby / "config.yml").config)
    overrides = config.model_overrides(doc)
    assert overrides is not None and overrides.overrides_draft
    assert overrides.draft_model == {"draft_model_name": "TinyLlama"}
    with pytest.raises(InvalidInputError, match="does not look like a TabbyAPI folder"):
        config.find_install(tmp_path / "tabbyAPI" / "models")


# -- hostile files -----------------------------------------------------------------------------


def test_an_alias_bomb_is_refused_before_anything_walks_it(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "config.yml"
    path.write_text("\n".join(lines) + "\ndraft_model:\n  draft_model_name: old\n")
    with pytest.raises(ConfigError, match="expand to more than 100,000 values"):
        config.load(path)


def test_pipes_devices_and_huge_files_are_not_read(tmp_path):
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInputError, match=r"is a named pipe \(FIFO\), not a file.*your "
                       "TabbyAPI config.yml"):
        config.load(fifo)
    with pytest.raises(InvalidInputError, match="is a character device, not a file"):
        config.load("/dev/zero")
    big = tmp_path / "big.yml"
    big.write_bytes(b"# x\n" * (1_100_000))
    with pytest.raises(InvalidInputError, match="4.2 MiB.*over 4.0 MiB"):
        config.load(big)


def test_a_block_scalar_value_is_refused_up_front_not_blamed_on_the_file(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("draft_model:\n  draft_model_name: |\n    MyDraft\n  draft_cache_mode: FP16\n")
    with pytest.raises(InvalidInputError, match="block scalar \\(\\|\\)"):
        config.plan_change(config.load(path), {(DRAFT, "draft_model_name"): "x"})
    # The other keys of the file can still be edited.
    change = config.plan_change(config.load(path), {(DRAFT, "draft_cache_mode"): "Q4"})
    assert "draft_cache_mode: Q4" in change.new_text


def test_a_value_shared_through_an_alias_is_refused(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("names:\n  main: &n Draft-A\ndraft_model:\n  draft_model_name: *n\n")
    with pytest.raises(InvalidInputError, match="shared through a YAML anchor/alias with names.main"):
        config.plan_change(config.load(path), {(DRAFT, "draft_model_name"): "x"})


def test_a_section_shared_through_an_alias_is_edited_with_a_warning(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("defaults: &d\n  draft_model_name: shared\ndraft_model: *d\n")
    change = config.plan_change(config.load(path), {(DRAFT, "draft_model_name"): "x"})
    assert change.warnings == ("draft_model is shared through a YAML anchor/alias with "
                               "defaults: this change applies there too.",)


def test_migrating_a_draft_section_tied_to_an_anchor_is_refused(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("model:\n  model_name: x\n  draft: &d\n    draft_model_name: y\nother: *d\n")
    with pytest.raises(ConfigError, match="model.draft is shared through a YAML anchor/alias"):
        config.plan_migration(config.load(path))


def test_a_misspelled_draft_key_is_flagged_with_the_closest_known_one(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("draft_model:\n  draft_model_nmae: x\n")
    messages = [p.message for p in config.load(path).problems() if p.severity == "warning"]
    assert any("draft_model_nmae is not a setting TabbyAPI knows" in m
               and "did you mean draft_model_name?" in m for m in messages)

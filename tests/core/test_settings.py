"""settings.json: wrong types are dropped one by one, never saved back mangled."""

from __future__ import annotations

import json

from specdeck.core import settings


def write(home, payload) -> None:
    path = settings.settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload) if not isinstance(payload, str) else payload)


def test_wrong_types_are_ignored_and_the_good_values_kept(specdeck_home, tmp_path):
    write(specdeck_home, {"config_path": 5, "recent_configs": "xyz",
                          "extra_model_dirs": [str(tmp_path), 7], "hub_endpoint": "http://h"})
    loaded = settings.load()
    assert loaded.config_path is None
    assert loaded.recent_configs == ()
    assert loaded.extra_model_dirs == ()
    assert loaded.hub_endpoint == "http://h"
    settings.save(loaded.with_config(tmp_path / "config.yml"))
    saved = json.loads(settings.settings_path().read_text())
    assert saved["recent_configs"] == [str(tmp_path / "config.yml")]  # not ["x", "y", "z"]


def test_not_an_object_or_not_json_gives_defaults(specdeck_home):
    for payload in ("[1, 2]", "{not json", '"text"'):
        write(specdeck_home, payload)
        assert settings.load() == settings.Settings()


def test_a_vanished_config_is_not_remembered(specdeck_home, tmp_path):
    cfg = tmp_path / "config.yml"
    cfg.write_text("model: {}\n")
    settings.save(settings.load().with_config(cfg))
    assert settings.remembered_config() == cfg
    cfg.unlink()
    assert settings.remembered_config() is None
    forgotten = settings.load().without_config()
    assert forgotten.config_path is None and str(cfg) not in forgotten.recent_configs

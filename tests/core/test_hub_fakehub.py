"""The fake Hub answers huggingface_hub's own calls the way the real Hub does.

These tests keep the test server honest: every other Hub test is only as good as it is.
The expected values are recomputed here from the bytes, independently of the server.
"""

from __future__ import annotations

import hashlib

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub import errors as hf
from hubserver import (  # noqa: F401 - fake_hub is a fixture
    GATED_REPO,
    GOOD_TOKEN,
    PRIVATE_REPO,
    TINY_REPO,
    fake_hub,
    memory_keyring,
)


def api(hub) -> HfApi:
    return HfApi(endpoint=hub.url, token=False)


def test_tree_listing_sizes_and_checksums_come_from_the_bytes(fake_hub):
    fake_hub.tree_page_size = 3  # force huggingface_hub to follow Link pagination
    data = fake_hub.repos[TINY_REPO].branches["8.0bpw"]
    listed = {e.path: e for e in api(fake_hub).list_repo_tree(TINY_REPO, revision="8.0bpw", recursive=True)}
    assert set(listed) == set(data)
    for path, content in data.items():
        entry = listed[path]
        assert entry.size == len(content)
        if path.endswith((".safetensors", ".model")):
            assert entry.lfs.sha256 == hashlib.sha256(content).hexdigest()
        else:
            assert entry.lfs is None
            assert entry.blob_id == hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    assert sum(1 for r in fake_hub.requests if "/tree/" in r.path) >= 3


def test_refs_model_info_and_paths_info(fake_hub):
    refs = api(fake_hub).list_repo_refs(TINY_REPO)
    assert [b.name for b in refs.branches] == ["main", "4.0bpw", "6_5", "8.0bpw"]
    info = api(fake_hub).model_info(TINY_REPO, revision="4.0bpw")
    assert info.sha == next(b.target_commit for b in refs.branches if b.name == "4.0bpw")
    assert "config.json" in {s.rfilename for s in info.siblings}
    paths = api(fake_hub).get_paths_info(TINY_REPO, ["config.json", "nope.txt"], revision="4.0bpw")
    assert [p.path for p in paths] == ["config.json"]


def test_resolve_headers_ranges_and_cdn_redirect(fake_hub):
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import get_session

    content = fake_hub.repos[TINY_REPO].branches["4.0bpw"]["output.safetensors"]
    url = hf_hub_url(TINY_REPO, "output.safetensors", revision="4.0bpw", endpoint=fake_hub.url)
    meta = get_hf_file_metadata(url, token=False)
    assert meta.size == len(content)
    assert meta.etag == hashlib.sha256(content).hexdigest()
    assert meta.commit_hash == api(fake_hub).model_info(TINY_REPO, revision="4.0bpw").sha
    assert meta.location.startswith(fake_hub.cdn_url)
    response = get_session().get(url, headers={"Range": "bytes=100-199"}, follow_redirects=True)
    assert response.status_code == 206
    assert response.content == content[100:200]
    assert response.headers["Content-Range"] == f"bytes 100-199/{len(content)}"


def test_hf_hub_download_gets_identical_bytes(fake_hub, tmp_path):
    path = hf_hub_download(TINY_REPO, "tokenizer.model", revision="4.0bpw", local_dir=tmp_path,
                           endpoint=fake_hub.url, token=False)
    assert open(path, "rb").read() == fake_hub.repos[TINY_REPO].branches["4.0bpw"]["tokenizer.model"]


@pytest.mark.parametrize(
    ("repo", "revision", "token", "error"),
    [
        ("nobody/none", "main", False, hf.RepositoryNotFoundError),
        (PRIVATE_REPO, "4.0bpw", False, hf.RepositoryNotFoundError),
        (GATED_REPO, "4.0bpw", False, hf.GatedRepoError),
        (TINY_REPO, "9.9bpw", False, hf.RevisionNotFoundError),
        (GATED_REPO, "4.0bpw", "hf_not_a_real_token", hf.HfHubHTTPError),
    ],
)
def test_errors_map_to_huggingface_hub_exceptions(fake_hub, tmp_path, repo, revision, token, error):
    with pytest.raises(error):
        hf_hub_download(repo, "config.json", revision=revision, local_dir=tmp_path,
                        endpoint=fake_hub.url, token=token)


def test_gated_repo_downloads_with_an_allowed_token(fake_hub, tmp_path):
    path = hf_hub_download(GATED_REPO, "config.json", revision="4.0bpw", local_dir=tmp_path,
                           endpoint=fake_hub.url, token=GOOD_TOKEN)
    assert open(path, "rb").read() == fake_hub.repos[GATED_REPO].branches["4.0bpw"]["config.json"]

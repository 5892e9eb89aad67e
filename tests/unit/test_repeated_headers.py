"""A header sent twice reaches us joined with commas (API Gateway, like Node, joins repeats): identical copies
are that one value, differing copies fail the header's own check; a token that itself holds a comma still works."""

from __future__ import annotations

import pytest
from amsg.errors import ApiError
from amsg.http.gates import repeated_header_value, require_client_token, require_user_id
from amsg.http.request import ApiRequest

USER = "0f8fad5b-d9cb-469f-a165-70867728950e"


def request(**headers: str) -> ApiRequest:
    return ApiRequest("GET", "/messages", headers={k.replace("_", "-"): v for k, v in headers.items()})


@pytest.mark.parametrize(
    ("joined", "expected"),
    [(None, None), ("a", "a"), ("a,a", "a"), ("a, a ,a", "a"), ("a,b", "a,b"), ("", "")],
)
def test_repeated_header_value(joined, expected):
    assert repeated_header_value(joined) == expected


def test_identical_user_ids_are_one_user_id():
    assert require_user_id(request(x_user_id=f"{USER}, {USER}")) == USER


def test_two_different_user_ids_are_refused():
    with pytest.raises(ApiError) as caught:
        require_user_id(request(x_user_id=f"{USER},{USER[:-1]}f"))
    assert caught.value.code == "INVALID_USER_ID_FORMAT"


@pytest.mark.parametrize("given", ["tok", "tok,tok", "tok, tok"])
def test_identical_tokens_pass(given):
    require_client_token(request(x_client_token=given), "tok")


@pytest.mark.parametrize("given", ["tok,other", "other", "", "tok,"])
def test_other_tokens_fail(given):
    with pytest.raises(ApiError) as caught:
        require_client_token(request(x_client_token=given), "tok")
    assert caught.value.code == "INVALID_CLIENT_TOKEN"


def test_a_token_with_a_comma_still_passes():
    require_client_token(request(x_client_token="a,b"), "a,b")

import math

import httpx

from fakellm.embeddings import embed


def _cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_are_deterministic_normalised_and_near_for_shared_pieces():
    assert embed("退款多久到账") == embed("退款多久到账")
    assert math.isclose(sum(x * x for x in embed("refund")), 1.0, rel_tol=1e-4)
    query = embed("退款什么时候到账")
    assert _cosine(query, embed("退款到账时间：一到三个工作日")) > _cosine(query, embed("忘记登录密码怎么办"))
    query = embed("reset my password")
    assert _cosine(query, embed("Resetting your password")) > _cosine(query, embed("Shipping options"))


def test_the_endpoint_answers_like_openai_and_refuses_bad_input(fake_llm):
    url = f"{fake_llm.api_base}/embeddings"
    body = httpx.post(url, json={"model": "any", "input": ["a b c", "退货"]}).json()
    assert [item["index"] for item in body["data"]] == [0, 1]
    assert body["data"][1]["embedding"] == embed("退货") and len(body["data"][0]["embedding"]) == 256
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert httpx.post(url, json={"model": "any", "input": "one"}).json()["data"][0]["embedding"] == embed("one")
    for bad in ({"input": []}, {"input": [1]}, {"input": None}):
        assert httpx.post(url, json=bad).status_code == 400
    assert httpx.post(url, content=b"{").status_code == 400

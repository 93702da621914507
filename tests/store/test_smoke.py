from outlive.domain import Status


async def test_create_and_claim(store):
    owner = await store.ensure_owner("alice")
    s = await store.create_session(owner.id, agent="demo", model="demo:scripted", prompt="hi")
    assert s.status is Status.QUEUED
    claims = await store.claim("w1", limit=4, lease_ttl=10)
    assert [c.session.id for c in claims] == [s.id]

import asyncio

from outlive.client import AsyncClient, EventRecord


async def main() -> None:
    async with AsyncClient() as client:  # uses OUTLIVE_URL and OUTLIVE_API_KEY
        other = await client.create_session("run long")
        session = await client.create_session("What is the weather in Paris?")
        # Reconnects on its own if the connection drops; no event is lost or repeated.
        async for item in client.stream(session.id, until_end=True):
            if isinstance(item, EventRecord) and item.type == "text_delta":
                print(item.data["text"], end="", flush=True)
        print()
        result = await client.cancel(other.id)  # a session that already ended is fine too
        print("cancel requested" if result.cancel_requested else f"already {result.status}")


asyncio.run(main())

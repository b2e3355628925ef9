"""An A2A client (the official a2a-sdk) that sends one task to `dhp-a2a` and follows it to the
end by polling the same task id, whatever happens to the workers doing it.

    python a2a_client.py http://127.0.0.1:8470/ [PAGES]
"""

import asyncio
import json
import sys

from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_message
from a2a.types.a2a_pb2 import GetTaskRequest, Role, SendMessageRequest, TaskState

OUTPUT_SCHEMA = {"type": "object", "required": ["pages", "words"],
                 "properties": {"pages": {"type": "integer"}, "words": {"type": "integer"}}}
DONE = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED}


async def main(url, pages):
    client = await create_client(url, client_config=ClientConfig(streaming=False, polling=True))
    intent = {"task_kind": "pages.count", "inputs": {"pages": pages},
              "output_schema": OUTPUT_SCHEMA}
    request = SendMessageRequest(message=new_message([new_data_part(intent)], role=Role.ROLE_USER))
    async for response in client.send_message(request):
        task = response.task
    print(f"task {task.id} sent", flush=True)
    said = None
    while task.status.state not in DONE:
        text = task.status.message.parts[0].text
        if text != said:
            print(f"task {task.id}: {TaskState.Name(task.status.state)}: {text}", flush=True)
            said = text
        await asyncio.sleep(0.1)
        task = await client.get_task(GetTaskRequest(id=task.id))
    print(f"task {task.id}: {TaskState.Name(task.status.state)}: "
          f"{task.status.message.parts[0].text}", flush=True)
    for artifact in task.artifacts:
        # the text part is the exact JSON (a data part's numbers are doubles: 12.0)
        exact = [json.loads(p.text) for p in artifact.parts if p.media_type == "application/json"
                 and p.HasField("text")]
        shown = exact[0] if exact else get_data_parts(artifact.parts)[0]
        print(f"artifact {artifact.name}: {json.dumps(shown)}", flush=True)
    await client.close()
    return 0 if task.status.state == TaskState.TASK_STATE_COMPLETED else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6)))

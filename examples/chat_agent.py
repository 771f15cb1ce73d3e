"""MAI inside a chat agent: a MessagesState graph with MAI as its visual-question expert.

    python examples/chat_agent.py        # MAI_GRAPH_BACKEND etc. choose the models (default fake)

The agent routes messages that carry an image to the MAI subgraph and answers the rest itself.
The MAI reply is an AIMessage whose metadata carries route, tokens and latency; streaming with
``subgraphs=True`` shows MAI's own nodes and token events under the parent's.
"""

import base64
import io

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from PIL import Image

from mai_graph.adapters.langchain import create_mai_chat_graph
from mai_graph.deploy.select import backends_from_env


def has_image(state: MessagesState) -> str:
    last = state["messages"][-1]
    parts = last.content if isinstance(last.content, list) else []
    return "vision" if any(p.get("type") in ("image", "image_url") for p in parts) else "chat"


def small_talk(state: MessagesState) -> dict:
    return {"messages": [AIMessage("Send me a picture and a question about it.")]}


def build_agent():
    small, large = backends_from_env()
    vision = create_mai_chat_graph(small, large).compile(name="vision_expert")
    builder = StateGraph(MessagesState)
    builder.add_node("vision", vision)
    builder.add_node("chat", small_talk)
    builder.add_conditional_edges(START, has_image, ["vision", "chat"])
    builder.add_edge("vision", END)
    builder.add_edge("chat", END)
    return builder.compile(checkpointer=InMemorySaver())


def data_url() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (128, 96), (30, 60, 220)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def main() -> None:
    agent = build_agent()
    cfg = {"configurable": {"thread_id": "demo"}}
    agent.invoke({"messages": [HumanMessage("hello")]}, cfg)
    question = HumanMessage(
        content=[
            {"type": "text", "text": "Is the picture mostly blue?"},
            {"type": "image_url", "image_url": {"url": data_url()}},
        ]
    )
    events = 0
    for namespace, mode, chunk in agent.stream(
        {"messages": [question]}, cfg, stream_mode=["updates", "custom"], subgraphs=True
    ):
        events += 1
        if mode == "custom" and chunk["event"] == "metrics":
            print(f"  [{'/'.join(namespace) or 'agent'}] {chunk['node']} ({chunk['role']}): "
                  f"{chunk['generated_tokens']} tokens")  # fmt: skip
    for message in agent.get_state(cfg).values["messages"]:
        text = message.content if isinstance(message.content, str) else "[image + text]"
        print(f"{message.type:>5}: {text}")
    reply = agent.get_state(cfg).values["messages"][-1]
    print(f"route={reply.response_metadata['route']} usage={reply.usage_metadata} "
          f"({events} stream events)")  # fmt: skip


if __name__ == "__main__":
    main()

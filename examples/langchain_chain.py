"""MAIChatModel in a LangChain chain: prompt template | MAI | output parser, then streaming.

    python examples/langchain_chain.py   # MAI_GRAPH_BACKEND etc. choose the models (default fake)

MAIChatModel answers questions about images anywhere a chat model fits. It does not call tools,
honour stop sequences or follow multi-turn instructions: it answers the last human message.
"""

import base64
import io

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from PIL import Image, ImageDraw

from mai_graph.adapters.langchain import MAIChatModel
from mai_graph.deploy.select import backends_from_env


def data_url() -> str:
    img = Image.new("RGB", (160, 120), (240, 240, 240))
    ImageDraw.Draw(img).ellipse((40, 20, 120, 100), fill=(20, 160, 40))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def main() -> None:
    small, large = backends_from_env()
    model = MAIChatModel(small=small, large=large, context={"cot_max_tokens": 64})
    prompt = ChatPromptTemplate.from_messages(
        [("human", [{"type": "text", "text": "{question}"},
                    {"type": "image_url", "image_url": {"url": "{image}"}}])]
    )  # fmt: skip
    chain = prompt | model | StrOutputParser()
    image = data_url()
    print("answer:", chain.invoke({"question": "Is there a green circle?", "image": image}))
    answers = chain.batch([{"question": q, "image": image} for q in ("Is it round?", "Is it red?")])
    print("batch: ", answers)
    print("stream:", end=" ")
    last = None
    for chunk in (prompt | model).stream({"question": "Is the circle green?", "image": image}):
        print(chunk.content, end="", flush=True)
        last = chunk
    print(f"\nroute:  {last.response_metadata['route']}, tokens: {last.usage_metadata}")


if __name__ == "__main__":
    main()

"""The official `openai` SDK against a live deepinfer server (scripted model)."""

import json
import unittest

import openai

from live_server import API_KEY, MODEL, shared_server

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["location"],
        },
    },
}]


def client(api_key=API_KEY):
    return openai.OpenAI(base_url=shared_server().base_url + "/v1", api_key=api_key,
                         max_retries=0, timeout=60)


class ChatCompletions(unittest.TestCase):
    def test_non_streaming_with_reasoning(self):
        completion = client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "please think about it"}])
        choice = completion.choices[0]
        self.assertEqual(choice.message.content, "The answer is 42.")
        self.assertEqual(choice.message.model_extra["reasoning_content"],
                         "Let me think about it.")
        self.assertEqual(choice.finish_reason, "stop")
        self.assertEqual(completion.model, MODEL)
        self.assertTrue(completion.id.startswith("chatcmpl-"))
        self.assertGreater(completion.usage.prompt_tokens, 0)
        self.assertEqual(completion.usage.total_tokens,
                         completion.usage.prompt_tokens + completion.usage.completion_tokens)

    def test_streaming(self):
        stream = client().chat.completions.create(
            model=MODEL, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "think about it"}])
        content, reasoning, finish, usage = "", "", None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(content, "The answer is 42.")
        self.assertEqual(reasoning, "Let me think about it.")
        self.assertEqual(finish, "stop")
        self.assertIsNotNone(usage)
        self.assertGreater(usage.completion_tokens, 5)

    def test_tool_call_round_trip(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = client().chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        choice = first.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(len(choice.message.tool_calls), 1)
        call = choice.message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertEqual(json.loads(call.function.arguments), {"location": "Paris", "days": 3})
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"temp": 20}'})
        second = client().chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        self.assertEqual(second.choices[0].message.content, "It is 20 degrees in Paris.")
        self.assertEqual(second.choices[0].finish_reason, "stop")

    def test_streamed_tool_call_arguments(self):
        stream = client().chat.completions.create(
            model=MODEL, stream=True, tools=TOOLS,
            messages=[{"role": "user", "content": "weather in Paris?"}])
        name, arguments, finish = "", "", None
        for chunk in stream:
            if not chunk.choices:
                continue
            for call in chunk.choices[0].delta.tool_calls or []:
                name += call.function.name or ""
                arguments += call.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(name, "get_weather")
        self.assertEqual(json.loads(arguments), {"location": "Paris", "days": 3})
        self.assertEqual(finish, "tool_calls")

    def test_json_mode(self):
        completion = client().chat.completions.create(
            model=MODEL, response_format={"type": "json_object"},
            extra_body={"thinking": {"type": "disabled"}},
            messages=[{"role": "user", "content": "json please"}])
        self.assertEqual(json.loads(completion.choices[0].message.content), {"answer": 42})

    def test_stop_sequence(self):
        completion = client().chat.completions.create(
            model=MODEL, stop=["STOP"], extra_body={"thinking": {"type": "disabled"}},
            messages=[{"role": "user", "content": "count to ten"}])
        self.assertEqual(completion.choices[0].message.content, "one two three ")
        self.assertEqual(completion.choices[0].finish_reason, "stop")

    def test_max_tokens_gives_length(self):
        completion = client().chat.completions.create(
            model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "think about"}])
        self.assertEqual(completion.choices[0].finish_reason, "length")
        self.assertEqual(completion.usage.completion_tokens, 3)


class Responses(unittest.TestCase):
    def test_non_streaming(self):
        response = client().responses.create(model=MODEL, input="please think about it")
        self.assertEqual(response.status, "completed")
        self.assertEqual(response.output_text, "The answer is 42.")
        self.assertEqual([item.type for item in response.output], ["reasoning", "message"])

    def test_streaming_events(self):
        stream = client().responses.create(model=MODEL, input="think about it", stream=True)
        types, text = [], ""
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
        self.assertEqual(types[0], "response.created")
        self.assertEqual(types[1], "response.in_progress")
        self.assertEqual(types[-1], "response.completed")
        self.assertIn("response.reasoning_text.delta", types)
        self.assertEqual(text, "The answer is 42.")

    def test_function_call(self):
        tools = [{"type": "function", "name": "get_weather",
                  "parameters": TOOLS[0]["function"]["parameters"]}]
        response = client().responses.create(model=MODEL, input="weather in Paris?",
                                             tools=tools)
        calls = [item for item in response.output if item.type == "function_call"]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].name, "get_weather")
        self.assertEqual(json.loads(calls[0].arguments), {"location": "Paris", "days": 3})
        follow = client().responses.create(model=MODEL, tools=tools, input=[
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
             "arguments": calls[0].arguments},
            {"type": "function_call_output", "call_id": calls[0].call_id,
             "output": '{"temp": 20}'}])
        self.assertEqual(follow.output_text, "It is 20 degrees in Paris.")


class Completions(unittest.TestCase):
    def test_raw_prompt(self):
        completion = client().completions.create(model=MODEL, prompt="Once upon",
                                                 max_tokens=4)
        self.assertEqual(completion.choices[0].finish_reason, "length")
        self.assertEqual(completion.usage.completion_tokens, 4)


class Errors(unittest.TestCase):
    def test_unknown_model(self):
        with self.assertRaises(openai.NotFoundError):
            client().chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "hi"}])

    def test_bad_request(self):
        with self.assertRaises(openai.BadRequestError) as raised:
            client().chat.completions.create(model=MODEL, messages=[])
        self.assertIn("Empty input messages", str(raised.exception))

    def test_out_of_range_temperature(self):
        with self.assertRaises(openai.BadRequestError):
            client().chat.completions.create(
                model=MODEL, temperature=5, messages=[{"role": "user", "content": "hi"}])

    def test_wrong_api_key(self):
        with self.assertRaises(openai.AuthenticationError):
            client(api_key="wrong").models.list()

    def test_models_list(self):
        self.assertEqual([m.id for m in client().models.list()], [MODEL])


if __name__ == "__main__":
    unittest.main()

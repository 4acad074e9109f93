"""The official `anthropic` SDK against a live deepinfer server (scripted model)."""

import unittest

import anthropic

from live_server import API_KEY, MODEL, shared_server

TOOLS = [{
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["location"],
    },
}]


def client(api_key=API_KEY):
    return anthropic.Anthropic(base_url=shared_server().base_url, api_key=api_key,
                               max_retries=0, timeout=60)


class Messages(unittest.TestCase):
    def test_thinking_and_text(self):
        message = client().messages.create(
            model=MODEL, max_tokens=200, thinking={"type": "enabled", "budget_tokens": 100},
            messages=[{"role": "user", "content": "please think about it"}])
        self.assertEqual([block.type for block in message.content], ["thinking", "text"])
        self.assertEqual(message.content[0].thinking, "Let me think about it.")
        self.assertEqual(message.content[1].text, "The answer is 42.")
        self.assertEqual(message.stop_reason, "end_turn")
        self.assertEqual(message.model, MODEL)
        self.assertGreater(message.usage.input_tokens, 0)

    def test_streaming(self):
        with client().messages.stream(
                model=MODEL, max_tokens=200,
                messages=[{"role": "user", "content": "think about it"}]) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        self.assertEqual(text, "The answer is 42.")
        self.assertEqual(final.content[-1].text, "The answer is 42.")
        self.assertEqual(final.stop_reason, "end_turn")
        self.assertGreater(final.usage.output_tokens, 5)

    def test_tool_use_round_trip(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = client().messages.create(model=MODEL, max_tokens=300, tools=TOOLS,
                                         messages=messages)
        self.assertEqual(first.stop_reason, "tool_use")
        uses = [block for block in first.content if block.type == "tool_use"]
        self.assertEqual(len(uses), 1)
        self.assertEqual(uses[0].name, "get_weather")
        self.assertEqual(uses[0].input, {"location": "Paris", "days": 3})
        messages.append({"role": "assistant", "content": first.content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": uses[0].id, "content": '{"temp": 20}'}]})
        second = client().messages.create(model=MODEL, max_tokens=300, tools=TOOLS,
                                          messages=messages)
        self.assertEqual(second.content[-1].text, "It is 20 degrees in Paris.")
        self.assertEqual(second.stop_reason, "end_turn")

    def test_streamed_tool_use(self):
        with client().messages.stream(
                model=MODEL, max_tokens=300, tools=TOOLS,
                messages=[{"role": "user", "content": "weather in Paris?"}]) as stream:
            final = stream.get_final_message()
        uses = [block for block in final.content if block.type == "tool_use"]
        self.assertEqual(uses[0].input, {"location": "Paris", "days": 3})
        self.assertEqual(final.stop_reason, "tool_use")

    def test_stop_sequence(self):
        message = client().messages.create(
            model=MODEL, max_tokens=100, stop_sequences=["STOP"],
            thinking={"type": "disabled"},
            messages=[{"role": "user", "content": "count to ten"}])
        self.assertEqual(message.content[-1].text, "one two three ")
        self.assertEqual(message.stop_reason, "stop_sequence")
        self.assertEqual(message.stop_sequence, "STOP")

    def test_max_tokens(self):
        message = client().messages.create(
            model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "think about"}])
        self.assertEqual(message.stop_reason, "max_tokens")
        self.assertEqual(message.usage.output_tokens, 3)

    def test_count_tokens(self):
        count = client().messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "Hello"}])
        self.assertEqual(count.input_tokens, 31)  # recipe.md §6 vector 1


class Errors(unittest.TestCase):
    def test_unknown_model(self):
        with self.assertRaises(anthropic.NotFoundError):
            client().messages.create(model="no-such-model", max_tokens=10,
                                     messages=[{"role": "user", "content": "hi"}])

    def test_bad_request(self):
        with self.assertRaises(anthropic.BadRequestError) as raised:
            client().messages.create(model=MODEL, max_tokens=10, messages=[])
        self.assertEqual(raised.exception.body["error"]["type"], "invalid_request_error")

    def test_wrong_api_key(self):
        with self.assertRaises(anthropic.AuthenticationError):
            client(api_key="wrong").messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])


if __name__ == "__main__":
    unittest.main()

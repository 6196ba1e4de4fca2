// tests/server/sdk_agents.cjs - the official `openai` and `@anthropic-ai/sdk` packages read a reply
// with reasoning, text and two tool calls (the scripted engine's Hermes reply) from tandem-server:
// chat completions (whole, and the SDK's stream helper that assembles tool calls), the Responses
// API (whole, and its stream helper), Anthropic messages (whole, and the stream helper that parses
// input_json_delta). Exits non-zero on any mismatch.
// Env: TANDEM_URL, TANDEM_MODEL; NODE_PATH points at the test set-up's node_modules.
const OpenAIModule = require('openai');
const AnthropicModule = require('@anthropic-ai/sdk');
const OpenAI = OpenAIModule.default || OpenAIModule;
const Anthropic = AnthropicModule.default || AnthropicModule;

const url = process.env.TANDEM_URL;
const model = process.env.TANDEM_MODEL;

function expect(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

const weather = {
  name: 'get_weather', description: 'Weather now',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const cities = (calls) => calls.map((c) => JSON.parse(c).city).join(',');

async function chat(openai) {
  const body = {
    model, messages: [{ role: 'user', content: 'Weather in Paris and Oslo?' }],
    tools: [{ type: 'function', function: weather }],
  };
  const r = await openai.chat.completions.create(body);
  const m = r.choices[0].message;
  expect(r.choices[0].finish_reason === 'tool_calls', 'chat finish_reason tool_calls');
  expect(m.tool_calls.length === 2 && m.tool_calls[0].function.name === 'get_weather', 'chat tool_calls');
  expect(cities(m.tool_calls.map((c) => c.function.arguments)) === 'Paris,Oslo', 'chat tool call arguments');
  expect(m.reasoning_content === 'Plan: two cities.' && m.content === 'Checking both.', 'chat reasoning_content and content');

  const stream = openai.beta.chat.completions.stream({ ...body, stream: true });
  let fragments = 0;
  stream.on('chunk', (c) => { if (c.choices[0] && c.choices[0].delta.tool_calls) fragments += 1; });
  const final = await stream.finalChatCompletion();
  const fm = final.choices[0].message;
  expect(fm.tool_calls.length === 2 && fm.tool_calls.every((c) => c.id.startsWith('call_')), 'chat stream assembles tool calls');
  expect(cities(fm.tool_calls.map((c) => c.function.arguments)) === 'Paris,Oslo', 'chat stream tool call arguments');
  expect(fm.content === 'Checking both.' && final.choices[0].finish_reason === 'tool_calls', 'chat stream content and finish');
  expect(fragments > 2, `chat stream sent tool calls in fragments (${fragments} chunks)`);
}

async function responses(openai) {
  const body = { model, input: 'Weather in Paris and Oslo?', tools: [{ type: 'function', ...weather }] };
  const r = await openai.responses.create(body);
  const calls = r.output.filter((i) => i.type === 'function_call');
  expect(r.status === 'completed' && calls.length === 2, 'responses function_call items');
  expect(cities(calls.map((c) => c.arguments)) === 'Paris,Oslo', 'responses call arguments');
  expect(r.output_text === 'Checking both.', 'responses output_text');
  expect(r.output[0].type === 'reasoning' && r.output[0].content[0].text === 'Plan: two cities.', 'responses reasoning item');

  const stream = openai.responses.stream(body);
  let text = '';
  let args = '';
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
  const final = await stream.finalResponse();
  const fcalls = final.output.filter((i) => i.type === 'function_call');
  const finalText = final.output.filter((i) => i.type === 'message').map((i) => i.content[0].text).join('');
  expect(text === 'Checking both.' && finalText === 'Checking both.', 'responses stream text deltas');
  expect(args === fcalls.map((c) => c.arguments).join(''), 'responses stream argument deltas');
  expect(cities(fcalls.map((c) => c.arguments)) === 'Paris,Oslo', 'responses stream final calls');
}

async function messages(anthropic) {
  const body = {
    model, max_tokens: 1000, messages: [{ role: 'user', content: 'Weather in Paris and Oslo?' }],
    tools: [{ name: weather.name, description: weather.description, input_schema: weather.parameters }],
  };
  const m = await anthropic.messages.create(body);
  const uses = m.content.filter((b) => b.type === 'tool_use');
  expect(m.stop_reason === 'tool_use' && uses.length === 2, 'anthropic tool_use blocks');
  expect(uses.map((u) => u.input.city).join(',') === 'Paris,Oslo', 'anthropic tool_use input');
  expect(m.content[0].type === 'thinking' && m.content[0].thinking === 'Plan: two cities.', 'anthropic thinking block');

  const stream = anthropic.messages.stream(body);
  let thinking = '';
  let partial = 0;
  stream.on('thinking', (d) => { thinking += d; });
  stream.on('inputJson', () => { partial += 1; });
  const final = await stream.finalMessage();
  const fuses = final.content.filter((b) => b.type === 'tool_use');
  expect(fuses.map((u) => u.input.city).join(',') === 'Paris,Oslo', 'anthropic stream parses input_json_delta');
  expect(thinking === 'Plan: two cities.' && partial > 2, 'anthropic stream thinking deltas and argument fragments');
  expect(final.stop_reason === 'tool_use', 'anthropic stream stop_reason');
}

async function main() {
  const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const anthropic = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  await chat(openai);
  await responses(openai);
  await messages(anthropic);
}

main().then(() => console.log('sdk agents: all passed'), (e) => {
  console.error(e);
  process.exit(1);
});

// tests/server/sdk_clients.cjs - drives tandem-server with the official `openai` and
// `@anthropic-ai/sdk` npm packages (non-streaming and streaming); exits non-zero on any mismatch.
// Env: TANDEM_URL, TANDEM_MODEL, TANDEM_KEY; NODE_PATH points at the test set-up's node_modules.
const OpenAI = require('openai');
const AnthropicModule = require('@anthropic-ai/sdk');
const Anthropic = AnthropicModule.default || AnthropicModule;

const url = process.env.TANDEM_URL;
const model = process.env.TANDEM_MODEL;
const key = process.env.TANDEM_KEY;

function expect(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

async function main() {
  const openai = new (OpenAI.default || OpenAI)({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hi' }];

  const chat = await openai.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, seed: 1 });
  expect(chat.object === 'chat.completion', 'openai chat object');
  expect(typeof chat.choices[0].message.content === 'string', 'openai chat content');
  expect(chat.usage.completion_tokens >= 1 && chat.usage.prompt_tokens >= 1, 'openai usage');

  const stream = await openai.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  expect(text === chat.choices[0].message.content, 'openai greedy stream equals non-stream');
  expect(usage && usage.completion_tokens === chat.usage.completion_tokens, 'openai stream include_usage');
  expect(finish === chat.choices[0].finish_reason, 'openai stream finish_reason');

  const lp = await openai.chat.completions.create({ model, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2 });
  expect(lp.choices[0].logprobs.content.length >= 1 && lp.choices[0].logprobs.content[0].top_logprobs.length === 2,
    'openai logprobs with top_logprobs');

  const cmpl = await openai.completions.create({ model, prompt: 'Once upon', max_tokens: 5, temperature: 0 });
  expect(typeof cmpl.choices[0].text === 'string' && cmpl.usage.completion_tokens >= 1, 'openai completions');

  let notFound = null;
  try {
    await openai.chat.completions.create({ model: 'missing-model', messages, max_tokens: 2 });
  } catch (e) {
    notFound = e;
  }
  expect(notFound && notFound.status === 404, 'openai unknown model is a 404 APIError');

  const anthropic = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0, timeout: 120000 });
  const msg = await anthropic.messages.create({
    model, max_tokens: 8, temperature: 0, system: 'You are terse.', messages: [{ role: 'user', content: 'Say hi' }],
  });
  expect(msg.type === 'message' && msg.content[0].type === 'text', 'anthropic message');
  expect(['end_turn', 'max_tokens', 'stop_sequence'].includes(msg.stop_reason), 'anthropic stop_reason');

  const events = [];
  let streamed = '';
  const s = anthropic.messages.stream({
    model, max_tokens: 8, temperature: 0, system: 'You are terse.', messages: [{ role: 'user', content: 'Say hi' }],
  });
  s.on('streamEvent', (ev) => events.push(ev.type));
  s.on('text', (t) => { streamed += t; });
  const final = await s.finalMessage();
  expect(streamed === msg.content[0].text, 'anthropic greedy stream equals non-stream');
  expect(final.usage.output_tokens === msg.usage.output_tokens, 'anthropic stream usage');
  expect(events[0] === 'message_start' && events[events.length - 1] === 'message_stop', 'anthropic event order');

  const count = await anthropic.messages.countTokens({ model, messages: [{ role: 'user', content: 'Say hi' }] });
  expect(count.input_tokens >= 1, 'anthropic count_tokens');
}

main().then(() => console.log('sdk clients: all passed'), (e) => {
  console.error(e);
  process.exit(1);
});

// tests/server/sdk_controls.cjs - the official `openai` npm client sending response_format to
// tandem-server: a json_schema request (non-streaming and streaming), each output printed as
// "output: <JSON string>" for the Python side to validate against the schema, and an invalid
// schema surfacing as the client's 400 error naming the problem. Exits non-zero on any mismatch.
// Env: TANDEM_URL, TANDEM_MODEL, TANDEM_SCHEMA (the schema's JSON); NODE_PATH: the set-up's node_modules.
const OpenAI = require('openai');

const url = process.env.TANDEM_URL;
const model = process.env.TANDEM_MODEL;
const schema = JSON.parse(process.env.TANDEM_SCHEMA);

function expect(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

async function main() {
  const openai = new (OpenAI.default || OpenAI)({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const messages = [{ role: 'user', content: 'A customer record as JSON.' }];
  const response_format = { type: 'json_schema', json_schema: { name: 'customer', strict: true, schema } };

  const chat = await openai.chat.completions.create({ model, messages, response_format, temperature: 1.0, seed: 11, max_tokens: 256 });
  expect(chat.choices[0].finish_reason === 'stop', 'the constrained output completed');
  console.log(`output: ${JSON.stringify(chat.choices[0].message.content)}`);

  const stream = await openai.chat.completions.create({
    model, messages, response_format, temperature: 1.0, seed: 12, max_tokens: 256, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.delta.content || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  expect(finish === 'stop', 'the streamed constrained output completed');
  console.log(`output: ${JSON.stringify(text)}`);

  let refused = null;
  try {
    await openai.chat.completions.create({
      model, messages, max_tokens: 4,
      response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: { type: 'object', properties: { a: { type: 'nope' } } } } },
    });
  } catch (e) {
    refused = e;
  }
  expect(refused && refused.status === 400 && /#\/properties\/a\/type/.test(refused.message),
    `an invalid schema is the client's 400 naming the problem (${refused && refused.message})`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

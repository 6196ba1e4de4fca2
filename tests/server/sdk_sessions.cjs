// tests/server/sdk_sessions.cjs - the official `openai` npm client running a plan of chat requests
// against tandem-server for sessions_server.py: the plan (JSON file named by argv[2]) is a list of
// rounds, each a list of request bodies sent together; rounds run one after another. Prints one
// JSON array: per request, its text, its tokens (from logprobs) and its usage, in plan order.
// Env: TANDEM_URL; NODE_PATH: the set-up's node_modules.
const fs = require('fs');
const OpenAI = require('openai');

async function main() {
  const plan = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const openai = new (OpenAI.default || OpenAI)({
    baseURL: `${process.env.TANDEM_URL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300000,
  });
  const results = [];
  for (const round of plan) {
    const replies = await Promise.all(round.map((body) => openai.chat.completions.create({ ...body, logprobs: true })));
    for (const r of replies) {
      const choice = r.choices[0];
      results.push({
        text: choice.message.content,
        tokens: (choice.logprobs?.content || []).map((t) => t.token),
        finish: choice.finish_reason,
        usage: r.usage,
      });
    }
  }
  console.log(JSON.stringify(results));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

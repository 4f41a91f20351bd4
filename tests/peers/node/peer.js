// A node-redisson client for the integration suite (tests/integration/node_redisson.rs):
// holds one lock of node-redisson on a Redis at 127.0.0.1:PORT, driven by lines on stdin,
// answering one line on stdout per command.
//
//   node peer.js PORT NAME
//
//   stdin       stdout
//   (start)     READY                     connected
//   id          ID <holder id>            the hash field its holds use
//   lock        LOCKED                    lock() (waits; the watchdog renews the lease)
//   try         TRY true|false            tryLock with no wait
//   unlock      UNLOCKED                  unlock()
//   quit        (exits 0)
//
// Any failure prints `ERROR <message>` and exits 1, so that the Rust side fails rather than
// skips when node or its packages are broken. node-redisson and ioredis are found through
// NODE_PATH (scripts/test installs them from package-lock.json).
'use strict';

const readline = require('node:readline');

function fail(e) {
  process.stdout.write(`ERROR ${e && e.stack ? e.stack.replace(/\n/g, ' | ') : e}\n`);
  process.exit(1);
}

async function main() {
  const [port, name] = process.argv.slice(2);
  if (!port || !name) {
    throw new Error('usage: node peer.js PORT NAME');
  }
  const { Redisson } = require('node-redisson');
  const redisson = new Redisson({
    redis: { options: { host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: 1 } },
  });
  await redisson.redis.ping();
  const lock = redisson.getLock(name);
  const say = (line) => process.stdout.write(`${line}\n`);
  say('READY');
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    switch (line.trim()) {
      case 'id':
        say(`ID ${lock.getClientName(lock.clientId)}`);
        break;
      case 'lock':
        await lock.lock();
        say('LOCKED');
        break;
      case 'try':
        say(`TRY ${await lock.tryLock(0)}`);
        break;
      case 'unlock':
        await lock.unlock();
        say('UNLOCKED');
        break;
      case 'quit':
        await redisson.quit();
        process.exit(0);
        break;
      default:
        throw new Error(`unknown command ${JSON.stringify(line)}`);
    }
  }
  // stdin closed: the test is gone.
  await redisson.quit();
  process.exit(0);
}

main().catch(fail);

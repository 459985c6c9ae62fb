// kafkajs against the pods, for tests/kafka/test_kafkajs.py: one scenario a run, each step's
// outcome printed as a JSON line for the test to check (it reads the records back through
// V1, not through kafkajs).
//
//   node client.js <scenario> <topic> <bootstrap,...>
//
// group:        two consumers of one group, each through its own pod, share the topic's two
//               partitions by kafkajs's own round-robin assignor (the classic protocol: the
//               leader assigns); an idempotent producer writes 12 keyed records (a GZIP batch
//               among them), which the members read and commit; the group and its offsets
//               as kafkajs's admin reads them, and its resetOffsets to the earliest and the
//               latest
// transaction:  consume-transform-produce: a transactional producer copies the records of
//               <topic> to <topic>-out and commits the consumer's offsets in its transaction
//               (sendOffsets); a second transaction is aborted; a read-committed consumer
//               reads <topic>-out
// trim:         DeleteRecords through kafkajs's admin; the producer's answers before and after
// sasl:         a record written as a user (KAFKAJS_SASL_MECHANISM, _USER, _PASSWORD) through
//               kafkajs's own PLAIN or SCRAM client; then the same user with a wrong password
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const [scenario, topic, bootstrap] = process.argv.slice(2)
const brokers = bootstrap.split(',')
const kafka = new Kafka({
  clientId: 'adapter-tests',
  brokers,
  logLevel: logLevel.ERROR,
  retry: { retries: 8, initialRetryTime: 100 },
})
const say = (event, fields) => console.log(JSON.stringify({ event, ...fields }))
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function until(check, what, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

const records = count =>
  Array.from({ length: count }, (_, i) => ({ key: `key-${i}`, value: `value-${i}` }))

async function joinGroup(groupId, via) {
  // one consumer per bootstrap address in `via`, all in one group, running once each holds
  // a share of the partitions: [{consumer, assigned, leader, messages}]
  const members = via.map((address, index) => {
    const client = new Kafka({ clientId: `member-${index}`, brokers: [address], logLevel: logLevel.ERROR })
    return { consumer: client.consumer({ groupId, maxWaitTimeInMs: 100 }), assigned: [], messages: [] }
  })
  for (const member of members) {
    member.consumer.on(member.consumer.events.GROUP_JOIN, event => {
      member.assigned = event.payload.memberAssignment[topic] || []
      member.leader = event.payload.isLeader
    })
    await member.consumer.connect()
    await member.consumer.subscribe({ topics: [topic], fromBeginning: true })
    await member.consumer.run({
      eachMessage: async ({ partition, message }) => {
        member.messages.push({
          partition,
          offset: message.offset,
          key: message.key.toString(),
          value: message.value.toString(),
        })
      },
    })
  }
  const held = () => members.reduce((n, m) => n + m.assigned.length, 0)
  await until(() => members.every(m => m.assigned.length > 0) && held() === 2, 'the group')
  return members
}

async function group() {
  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] })
  say('created', { created })
  const groupId = `${topic}-group`
  const members = await joinGroup(groupId, brokers)
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const all = records(12)
  const sent = []
  sent.push(...(await producer.send({ topic, messages: all.slice(0, 4) })))
  sent.push(...(await producer.send({ topic, messages: all.slice(4, 8), compression: CompressionTypes.GZIP })))
  sent.push(...(await producer.send({ topic, messages: all.slice(8) })))
  say('sent', { sent })
  await producer.disconnect()
  await until(() => members.reduce((n, m) => n + m.messages.length, 0) >= all.length, 'the records')
  // (before they stop: the first to stop leaves, and the other takes both partitions)
  for (const member of members) {
    say('member', { leader: member.leader, assigned: member.assigned, messages: member.messages })
  }
  // kafkajs commits what was read when it stops
  for (const member of members) await member.consumer.stop()
  const [description] = (await admin.describeGroups([groupId])).groups
  say('described', { state: description.state, protocolType: description.protocolType })
  for (const member of members) await member.consumer.disconnect()
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  say('committed', { offsets: offsets[0].partitions })
  // kafkajs's reset commits Kafka's logical offsets (-2 earliest, -1 latest)
  await admin.resetOffsets({ groupId, topic, earliest: true })
  const earliest = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions
  await admin.resetOffsets({ groupId, topic })
  const latest = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions
  say('reset', { earliest, latest })
  const listed = await admin.listGroups()
  say('listed', { groups: listed.groups.filter(g => g.groupId === groupId) })
  say('topic_offsets', { offsets: await admin.fetchTopicOffsets(topic) })
  await admin.disconnect()
}

async function transaction() {
  const admin = kafka.admin()
  await admin.connect()
  const out = `${topic}-out`
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }, { topic: out, numPartitions: 1 }] })
  const plain = kafka.producer()
  await plain.connect()
  await plain.send({ topic, messages: records(5) })
  await plain.disconnect()

  const groupId = `${topic}-copier`
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 100 })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const byOffset = new Map() // (a message is read again until its offset is committed)
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      byOffset.set(message.offset, message)
    },
  })
  await until(() => byOffset.size >= 5, 'the records to copy')
  await consumer.stop()
  const messages = [...byOffset.values()]
  const last = messages[messages.length - 1].offset

  const producer = kafka.producer({ transactionalId: `${topic}-txn`, maxInFlightRequests: 1, idempotent: true })
  await producer.connect()
  const committed = await producer.transaction()
  await committed.send({
    topic: out,
    messages: messages.map(m => ({ key: m.key, value: `copied ${m.value.toString()}` })),
  })
  await committed.sendOffsets({
    consumerGroupId: groupId,
    topics: [{ topic, partitions: [{ partition: 0, offset: (BigInt(last) + 1n).toString() }] }],
  })
  await committed.commit()
  const aborted = await producer.transaction()
  await aborted.send({ topic: out, messages: [{ key: 'aborted', value: 'never read' }] })
  await aborted.abort()
  const after = await producer.transaction()
  await after.send({ topic: out, messages: [{ key: 'after', value: 'read' }] })
  await after.commit()
  await producer.disconnect()
  await consumer.disconnect()

  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  say('committed', { last, offsets: offsets[0].partitions })
  const reader = kafka.consumer({ groupId: `${topic}-reader`, maxWaitTimeInMs: 100 })
  await reader.connect()
  await reader.subscribe({ topics: [out], fromBeginning: true })
  const read = []
  await reader.run({
    eachMessage: async ({ message }) => {
      read.push({ key: message.key.toString(), value: message.value.toString() })
    },
  })
  await until(() => read.some(m => m.key === 'after'), 'the committed records')
  await reader.disconnect()
  say('read', { read })
  await admin.disconnect()
}

async function trim() {
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }] })
  const producer = kafka.producer()
  await producer.connect()
  const [first] = await producer.send({ topic, messages: records(3) })
  const cut = (BigInt(first.baseOffset) + 2n).toString()
  await admin.fetchTopicMetadata({ topics: [topic] }) // (the admin's leaders of the topic)
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: cut }] })
  const [after] = await producer.send({ topic, messages: [{ key: 'after', value: 'after' }] })
  say('trimmed', { first, cut, after, offsets: await admin.fetchTopicOffsets(topic) })
  await producer.disconnect()
  await admin.disconnect()
}

async function sasl() {
  // KAFKAJS_SASL_MECHANISM, _USER, _PASSWORD: kafkajs's own PLAIN and SCRAM clients
  const env = process.env
  const user = { mechanism: env.KAFKAJS_SASL_MECHANISM, username: env.KAFKAJS_SASL_USER }
  const good = new Kafka({ brokers, logLevel: logLevel.NOTHING,
    sasl: { ...user, password: env.KAFKAJS_SASL_PASSWORD } }) // prettier-ignore
  const producer = good.producer()
  await producer.connect()
  const [sent] = await producer.send({ topic, messages: [{ key: 'k', value: user.mechanism }] })
  await producer.disconnect()
  say('sent', { sent })
  const wrong = new Kafka({ brokers, logLevel: logLevel.NOTHING, retry: { retries: 0 },
    sasl: { ...user, password: `not ${env.KAFKAJS_SASL_PASSWORD}` } }) // prettier-ignore
  const admin = wrong.admin()
  try {
    await admin.connect()
    await admin.listTopics()
    say('refused', { error: null })
  } catch (error) {
    say('refused', { error: error.name, message: error.message })
  }
}

const scenarios = { group, transaction, trim, sasl }
scenarios[scenario]()
  .then(() => process.exit(0))
  .catch(error => {
    console.error(error)
    process.exit(1)
  })

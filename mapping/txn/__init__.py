"""The transaction coordinator: transactional ids' state (``txn_state``), InitProducerId,
AddPartitions, EndTxn (``transactions``; ``lua/txn_coord``), finishing what a dead pod left
(``txn_completer``) and what ``inspect transactions`` reads. Imports ``replication`` and the
floors below it."""
